"""What the chat shows, as pure functions of the stored thread: no Gradio events, no store writes.

Text from both sides is Markdown with HTML neutralised (`display_markdown`), and the Chatbot's
sanitizer stays on: a `<script>` or `onerror=` payload shows as text. Errors become friendly
notices written for the person chatting, never a stack trace.
"""

from __future__ import annotations

from typing import Any

from chat.backends.base import BackendError, BackendUnavailable
from chat.inflight import ServiceClosing
from chat.threads import MessageView, display_markdown
from feedback.attributes import LEVEL_WORDS, InvalidAttributes
from feedback.store import InvalidInput, NotFound


def friendly_error(exc: BaseException | str) -> str:
    text = str(exc)
    if isinstance(exc, BackendUnavailable):
        return f"The model is not available right now. Please try again in a minute. ({text})"
    if isinstance(exc, BackendError):
        return f"The model could not finish this answer. Try again, or rephrase. ({text})"
    if isinstance(exc, NotFound):
        return "That conversation or message is not available (it may have been deleted). Start a new chat."
    if isinstance(exc, (ServiceClosing, InvalidInput, InvalidAttributes)):
        return text
    return "Something went wrong on our side and it was logged. Please try again."


def _answer_footer(v: MessageView) -> str:
    parts = []
    if v.sibling_count > 1:
        parts.append(f"‹ {v.sibling_index + 1} / {v.sibling_count} ›")
    if v.rating:
        # Words, not only an emoji: the reasons must read right in every font and screen reader.
        verdict = "Liked" if v.rating["value"] > 0 else "Disliked"
        reasons = ", ".join(v.rating["reasons"])
        parts.append(f"{verdict}: {reasons}" if reasons else verdict)
    return ("\n\n<sub>" + " &nbsp; ".join(p.replace("<", "&lt;") for p in parts) + "</sub>") if parts else ""


def _assistant_text(v: MessageView) -> str:
    if v.status == "error":
        err = (v.generation or {}).get("error") or "unknown error"
        return f"⚠️ *The model could not answer this time.* Use regenerate to try again.\n\n<sub>{display_markdown(err)}</sub>"
    body = display_markdown(v.content) if v.content else "*(no answer)*"
    if v.status == "interrupted":
        body += "\n\n*— stopped*"
    return body + _answer_footer(v)


def render(views: list[MessageView]) -> tuple[list[dict], list[str | None], list[str]]:
    """(chatbot messages, feedback_value per answer, message ids per chatbot index)."""
    messages, feedback, ids = [], [], []
    for v in views:
        if v.role == "system":
            continue  # system prompts (from API clients) are not part of the visible chat
        if v.role == "user":
            messages.append({"role": "user", "content": display_markdown(v.content)})
        else:
            messages.append({"role": "assistant", "content": _assistant_text(v)})
            value = (v.rating or {}).get("value")
            feedback.append("Like" if value == 1 else "Dislike" if value == -1 else None)
        ids.append(v.id)
    return messages, feedback, ids


def focus_of(views: list[MessageView], preferred: str | None = None) -> str | None:
    """The message the branch bar is about: the preferred one if it has siblings, else the
    deepest message in the thread that has siblings."""
    with_sibs = [v for v in views if v.sibling_count > 1 and v.role != "system"]
    if preferred and any(v.id == preferred for v in with_sibs):
        return preferred
    return with_sibs[-1].id if with_sibs else None


def branch_label(v: MessageView) -> str:
    what = "Answer" if v.role == "assistant" else "Your question, version"
    return (f"**{what} {v.sibling_index + 1} / {v.sibling_count}** "
            "<sub>— the one you stay on is kept</sub>")


def level_line(name: str, value: Any) -> str:
    try:
        level = int(round(float(value)))
        return f"{level} — {LEVEL_WORDS[name][level]}"
    except (ValueError, TypeError, IndexError):
        return ""


def who_line(ident: Any) -> str:
    if getattr(ident, "name", None):
        role = " (operator)" if ident.is_admin else ""
        return f"Signed in as **{ident.name.replace('<', '&lt;')}**{role} · [Sign out](/signout)"
    return "Chatting as a guest · [Sign in](/signin)"


def edited_text(value: Any) -> str:
    """The chatbot hands back the edited text (a string or a list of content blocks); undo the
    display escaping we applied so the stored text is what the user sees."""
    if isinstance(value, list):
        value = "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in value)
    elif isinstance(value, dict):
        value = value.get("text", "")
    return str(value or "").replace("&lt;", "<")
