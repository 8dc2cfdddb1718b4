"""Tests of harness.speed."""
