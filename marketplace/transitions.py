"""State machines: every status field (order, job, payment, delivery) has one map of allowed
moves in its models.py and one function that moves it; this is the check they share."""


def require_transition(
    *, transitions: dict, from_status: str, to_status: str, what: str, error: type
) -> None:
    """Raise `error` (a Conflict) unless the map allows from_status -> to_status."""
    if to_status not in transitions[from_status]:
        raise error(
            f"{what} cannot go from {from_status} to {to_status}.",
            fields={"status": [f"Not allowed from {from_status}."]},
        )
