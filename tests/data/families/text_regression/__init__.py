"""text-regression's training part (`training.py`), as a family that lives outside the package
would write it; the tests register its spec themselves."""
