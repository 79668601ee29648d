"""Writes for fleets and dispatch, by subdomain. Every state change goes through here.

    registry.py         fleets, sites, robots
    jobs.py             the job state machine (job_move), progress, staff moves, cancellation
    planning.py         a paid order's hours -> jobs
    batch_dispatch.py   finding jobs a fleet, a batch per transaction (fleets/matching.py)
    assignments.py      a fleet takes a job; the job and offer payloads
    dispatch.py         offers, bids, accept/decline
    sweep.py            the periodic sweep (celery beat)
    webhooks.py         events to fleets (sent by marketplace.outbound_webhooks)

Conventions: keyword-only functions; lock, then check (rows locked in the order
order -> job -> offer/assignment -> fleet, so two writers never deadlock); side effects
(tasks, webhooks) enqueued after commit (marketplace.queueing); safe to run twice.
"""
