"""What the chat shows, as pure functions of the stored thread: no Gradio events, no store writes.

Text from both sides is Markdown with HTML neutralised (`display_markdown`), and the Chatbot's
sanitizer stays on: a `<script>` or `onerror=` payload shows as text. Errors become friendly
notices written for the person chatting, never a stack trace.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from chat.backends.base import BackendError
from chat.inflight import ServiceClosing
from chat.notices import model_failure, reference_for, unexpected_failure
from chat.threads import MessageView, display_markdown
from store import InvalidInput, NotFound
from store.attributes import LEVEL_WORDS, InvalidAttributes


def friendly_error(exc: BaseException, reference: str | None = None) -> str:
    """A notice in the user's words; a model failure or a bug gets a reference (see chat.notices)."""
    if isinstance(exc, BackendError):
        return model_failure(exc, reference or reference_for())
    if isinstance(exc, NotFound):
        return "That conversation or message is not available (it may have been deleted). Start a new chat."
    if isinstance(exc, (ServiceClosing, InvalidInput, InvalidAttributes)):
        return str(exc)  # written for the user where it is raised ("The message is too long…")
    return unexpected_failure(exc, reference or reference_for())


# The attributes an answer's footer names: the two sliders people use, then any other that differs
# between the answer and its siblings.
_SHOWN = ("verbosity", "complexity")


def steering_line(v: MessageView) -> str:
    """"verbosity 1 · complexity 3", with the values that differ among siblings in bold."""
    mine = (v.generation or {}).get("attributes") or {}
    if not mine:
        return ""
    others = [a for a in v.sibling_attributes if a]
    changed = {n for n in mine if any(a.get(n) != mine[n] for a in others)}
    names = [*_SHOWN, *sorted(n for n in changed if n not in _SHOWN)]
    return " · ".join(f"**{n} {mine[n]}**" if n in changed else f"{n} {mine[n]}" for n in names if n in mine)


def _answer_footer(v: MessageView) -> str:
    parts = []
    if v.sibling_count > 1:
        parts.append(f"‹ {v.sibling_index + 1} / {v.sibling_count} ›")
    if steering := steering_line(v):
        parts.append(steering)
    if v.rating:
        # Words, not only an emoji: the reasons must read right in every font and screen reader.
        verdict = "Liked" if v.rating["value"] > 0 else "Disliked"
        reasons = ", ".join(v.rating["reasons"])
        parts.append(f"{verdict}: {reasons}" if reasons else verdict)
    return ("\n\n<sub>" + " &nbsp;·&nbsp; ".join(p.replace("<", "&lt;") for p in parts) + "</sub>") if parts else ""


def _assistant_text(v: MessageView) -> str:
    if v.status == "error":  # the technical detail is on the stored answer, for the operator
        return (f"⚠️ *The model could not answer this time.* Use regenerate to try again."
                f"\n\n<sub>Reference {v.id[:8]}</sub>")
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
        role = " · [Operator screen](/operator)" if ident.is_admin else ""
        return (f"Signed in as **{ident.name.replace('<', '&lt;')}**{role} · [Sign out](/signout) · "
                "[Sign out everywhere](/signin)")
    return "Chatting as a guest · [Sign in](/signin)"


def edited_text(value: Any) -> str:
    """The chatbot hands back the edited text (a string or a list of content blocks); undo the
    display escaping we applied so the stored text is what the user sees."""
    if isinstance(value, list):
        value = "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in value)
    elif isinstance(value, dict):
        value = value.get("text", "")
    return str(value or "").replace("&lt;", "<")


def conversation_label(title: str, updated_at: datetime, now: datetime | None = None) -> str:
    """"Title · 14:05" today, "Title · 3 Dec" this year, "Title · 3 Dec 2025" before."""
    now = now or datetime.now(updated_at.tzinfo)
    if updated_at.date() == now.date():
        when = updated_at.strftime("%H:%M")
    elif updated_at.year == now.year:
        when = f"{updated_at.day} {updated_at:%b}"
    else:
        when = f"{updated_at.day} {updated_at:%b %Y}"
    return f"{(title or 'New conversation')[:56]} · {when}"
