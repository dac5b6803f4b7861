"""Helpers several unit test files share, by the file they came from."""
