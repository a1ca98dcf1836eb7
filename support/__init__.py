"""Support code shared by tests/ and bench/, not part of the product (not in the wheel)."""
