"""Unit tests of :mod:`eventhubs_spark.auth.secret`."""

from __future__ import annotations

import logging
import pickle

from eventhubs_spark.auth.secret import Secret


def test_a_secret_never_shows_itself_but_survives_pickling_and_compares_by_value(caplog):
    secret = Secret("TOPSECRET")
    with caplog.at_level(logging.INFO):
        logging.getLogger("eventhubs_spark").info("settings %s %r %s", secret, secret, [secret])
    assert "TOPSECRET" not in caplog.text and "Secret(***)" in caplog.text
    assert f"{secret}" == repr(secret) == "Secret(***)"
    back = pickle.loads(pickle.dumps(secret))
    assert back == secret and back.reveal() == "TOPSECRET" and hash(back) == hash(secret)
    assert secret != Secret("other") and secret != "TOPSECRET"
