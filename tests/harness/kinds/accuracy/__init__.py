"""Tests of harness.lra."""
