"""Writes for episodes and datasets, by subdomain. Every state change goes through here.

episodes.py    registration, presigned uploads, completion
qa.py          QA decisions and accrual of accepted time
deliveries.py  assembly of the LeRobot v3.0 dataset, notices, the pilot review
downloads.py   signed, audited download links; revocation
sweep.py       what celery beat re-queues (lost messages, dead workers)
"""
