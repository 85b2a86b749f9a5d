"""Tests that run real qcluster processes (marked ``cluster``)."""
