"""Helpers shared by the unit tests that came from test_encode.py."""

from __future__ import annotations

from hypothesis import strategies as st

texts = st.text(max_size=300)


bodies = st.one_of(st.binary(max_size=70_000), st.text(max_size=400))


properties = st.one_of(st.none(), st.dictionaries(texts, st.one_of(texts, st.none()), max_size=5))


keys = st.one_of(st.none(), st.text(max_size=300))
