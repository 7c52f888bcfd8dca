"""Builders shared by test modules (synthetic stores, fake cores, small native programs), so no
test module imports another (issue 25)."""
