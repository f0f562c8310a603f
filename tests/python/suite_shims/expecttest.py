"""Stand-in for PyPI's `expecttest` (no Debian package; torch's test utilities
import it).  torch_suite.py puts this folder on sys.path only when the real
module is missing.  The distributed suite uses no expect-tests: TestCase is
plain unittest, and an inline-expect assertion fails loudly instead of
passing unchecked."""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802 - expecttest's name
        raise AssertionError("expecttest is not installed: assertExpectedInline cannot check")
