"""The dashboard's pages, one module or package per page. Each exports PATH (its path, or the prefix of its
paths), layout(ctx, pathname, search) -> the page's components, and register(app, ctx), which adds its callbacks
to the app; ctx is the app's AppContext. The routing table (fragviz.ui.factory.ROUTES) maps paths to them.
common.py holds what every page uses (the header, cards, error panels, URL helpers)."""
