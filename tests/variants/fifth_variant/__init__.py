"""A fifth variant, `tempered`, as a whole folder: copied into a copy of the package by
tests/variants/test_fifth_variant.py to show that a variant touches only its own folder."""
