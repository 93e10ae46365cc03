"""The dashboard's figures: records in, go.Figure out. Pure (no Dash components, no store, no library), so
they are tested without a server. One module per subject; style.py holds what they share."""
