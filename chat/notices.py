"""What a person is told when something goes wrong, and the reference that ties it to the log.

A model server's own error text ("The model server at http://10.0.0.5:8001 rejected the API key;
set backend.api_key") is for the operator: it names internal addresses and settings. People see
what happened and what to do, in their words, with a short reference; the full text goes to the
log under that reference, and stays on the stored answer (`generation.error`), where the operator
screen shows it. The reference of a failed answer is its message id's first 8 characters, so the
operator can find the answer from what the user reports.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from chat.backends.base import BackendError, BackendUnavailable

log = logging.getLogger("advisor.errors")


def reference_for(turn: Any = None) -> str:
    """The failed answer's id prefix when it was stored, else a fresh reference."""
    answer = getattr(turn, "answer", None)
    return (answer.id if answer is not None else uuid.uuid4().hex)[:8]


def model_failure(exc: BaseException, reference: str) -> str:
    """The notice for a model that failed or is down; logs the technical detail under `reference`."""
    log.warning("model failure [reference %s]: %s: %s", reference, type(exc).__name__, exc)
    if isinstance(exc, BackendUnavailable):
        return (f"The advisor's model is not available right now. Please try again in a minute. "
                f"(Reference {reference}.)")
    return f"The model could not finish this answer. Try again, or rephrase your question. (Reference {reference}.)"


def unexpected_failure(exc: BaseException, reference: str) -> str:
    log.error("unexpected failure [reference %s]", reference, exc_info=exc)
    return f"Something went wrong on our side. Please try again. (Reference {reference}.)"


def is_model_failure(exc: BaseException) -> bool:
    return isinstance(exc, BackendError)


def privacy_notice(*, retention_days: int, training_default: bool) -> list[str]:
    """What a person is told about their data, on their first visit and on the sign-in page:
    what is stored, what it is used for, how long it is kept, how to delete it. One sentence a
    line; callers render them as Markdown or HTML."""
    kept = (f"Conversations are deleted {retention_days} days after their last message."
            if retention_days else "Conversations are kept until you delete them.")
    use = ("By default they also help improve the advisor: the feedback you give while chatting can train "
           "new versions of it, after names, e-mail addresses, phone numbers and other personal data are "
           "replaced by placeholders." if training_default else
           "They are not used to improve the advisor unless you switch that on.")
    return [
        "We store your conversations, the answers, your ratings and the steering settings of each answer, "
        "so you can come back to them.",
        use,
        "You can switch this off under “Your conversations → Use my conversations to improve the advisor”.",
        kept,
        "Delete one conversation with its trash icon, or everything with “Delete my data”; "
        "“Download my data” gives you a copy.",
    ]
