"""What a run of the agent did (`FleetAgent.run()` returns it; fleet_agent/agent.py)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class RunSummary:
    """What a run did; `run()` returns it, and `FleetAgent.summary` keeps it up to date."""

    offers_accepted: int = 0
    offers_declined: int = 0
    episodes_uploaded: int = 0
    defective_uploaded: int = 0
    uploads_by_method: Counter = field(default_factory=Counter)
    episodes_accepted: int = 0
    episodes_rejected: int = 0
    rejection_reasons: Counter = field(default_factory=Counter)
    webhooks_received: Counter = field(default_factory=Counter)
    jobs_completed: set = field(default_factory=set)
    errors: list = field(default_factory=list)
    elapsed_seconds: float = 0.0
    stopped_because: str = ""
    # the collection plan (issue 30): objects, scenes, calibrations this run registered
    plan_registered: Counter = field(default_factory=Counter)

    def as_dict(self) -> dict:
        return {
            "offers_accepted": self.offers_accepted,
            "offers_declined": self.offers_declined,
            "episodes_uploaded": self.episodes_uploaded,
            "defective_uploaded": self.defective_uploaded,
            "uploads_by_method": dict(self.uploads_by_method),
            "episodes_accepted": self.episodes_accepted,
            "episodes_rejected": self.episodes_rejected,
            "rejection_reasons": dict(self.rejection_reasons),
            "webhooks_received": dict(self.webhooks_received),
            "jobs_completed": sorted(self.jobs_completed),
            "errors": list(self.errors),
            "elapsed_seconds": round(self.elapsed_seconds, 2),
            "stopped_because": self.stopped_because,
            "plan_registered": dict(self.plan_registered),
        }
