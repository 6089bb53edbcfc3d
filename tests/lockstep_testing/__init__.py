"""Test support shared by Lockstep's test suites (importable as ``lockstep_testing``)."""
