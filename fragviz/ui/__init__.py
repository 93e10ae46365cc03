"""The dashboard (Dash + Plotly on Flask). Only this package and app.py import Dash and Plotly."""
