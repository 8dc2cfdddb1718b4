"""Tests of harness.run."""
