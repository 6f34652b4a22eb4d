"""The web UI: `app` (build_ui, UIDeps), `layout` (the chat tab's components), `handlers` (what each
event does), `events` (which event runs which handler), `render` (what the chat shows)."""
