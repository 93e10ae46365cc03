"""What holds memory: allocation lifetimes (lifetimes.py), kinds from stacks (kinds.py), views at a bounded
level of detail (bands.py)."""
