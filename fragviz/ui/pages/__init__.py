"""Page layouts and their callbacks, one module per page; each has layout(...) and register(app, ctx)."""
