"""The emulator's Schema Registry (issue 40, item 1): the official ``azure-schemaregistry`` client and its Avro
encoder work against it unchanged, signed in with Microsoft Entra ID (LocalEntra) and trusting the same CA file
as the emulator's other TLS listeners."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from eventhubs_emulator import Emulator
from eventhubs_emulator.entra import LocalEntra

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}


@pytest.fixture()
def registry(monkeypatch) -> Iterator[tuple[Emulator, LocalEntra, object]]:
    from azure.identity import ClientSecretCredential
    from azure.schemaregistry import SchemaRegistryClient

    with LocalEntra() as entra:
        entra.add_secret_client("registry-app", "registry-secret")
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", entra.ca_file)  # one CA for the token service and the registry
        emulator = Emulator({"orders": 1}, token_verifier=entra.verify, schema_registry_port=0,
                            certificate=(entra.cert_file, entra.key_file),
                            schema_groups={"shop": "Avro", "docs": "Json"})  # fmt: skip
        with emulator:
            credential = ClientSecretCredential(entra.tenant_id, "registry-app", "registry-secret",
                                                authority=entra.authority, disable_instance_discovery=True)  # fmt: skip
            yield emulator, entra, SchemaRegistryClient(emulator.schema_registry_namespace, credential)


def test_the_official_client_registers_finds_and_fetches_schemas(registry):
    from azure.core.exceptions import HttpResponseError, ResourceNotFoundError

    emulator, _, client = registry
    first = client.register_schema("shop", "Order", json.dumps(ORDER), "Avro")
    assert (first.group_name, first.name, first.version, first.format.value) == ("shop", "Order", 1, "Avro")
    spaced = json.dumps(ORDER, indent=4)  # the same schema, spelt otherwise: the same id
    assert client.register_schema("shop", "Order", spaced, "Avro").id == first.id
    evolved = {**ORDER, "fields": [*ORDER["fields"], {"name": "qty", "type": "int", "default": 1}]}
    second = client.register_schema("shop", "Order", json.dumps(evolved), "Avro")
    assert second.version == 2 and second.id != first.id
    fetched = client.get_schema(first.id)
    assert json.loads(fetched.definition) == ORDER and fetched.properties.id == first.id
    assert json.loads(client.get_schema(group_name="shop", name="Order", version=2).definition) == evolved
    assert client.get_schema_properties("shop", "Order", json.dumps(ORDER), "Avro").id == first.id
    with pytest.raises(ResourceNotFoundError):
        client.get_schema("0" * 32)
    with pytest.raises(HttpResponseError) as wrong_group:
        client.register_schema("nogroup", "Order", json.dumps(ORDER), "Avro")
    assert wrong_group.value.status_code == 404
    with pytest.raises(HttpResponseError) as wrong_format:
        client.register_schema("docs", "Order", json.dumps(ORDER), "Avro")  # a Json group
    assert wrong_format.value.status_code == 415
    assert emulator.registry_server.requests >= 9


def test_the_official_avro_encoder_round_trips_through_the_registry(registry):
    from azure.schemaregistry.encoder.avroencoder import AvroEncoder

    _, _, client = registry
    encoder = AvroEncoder(client=client, group_name="shop", auto_register=True)
    message = encoder.encode({"id": 7, "item": "tea"}, schema=json.dumps(ORDER))
    schema_id = client.get_schema_properties("shop", "shop.Order", json.dumps(ORDER), "Avro").id
    assert message["content_type"] == f"avro/binary+{schema_id}"
    assert encoder.decode(message) == {"id": 7, "item": "tea"}
    # a reader that registered nothing decodes by the id alone
    reader = AvroEncoder(client=client)
    assert reader.decode(message) == {"id": 7, "item": "tea"}


def test_the_registry_takes_entra_tokens_only(registry):
    emulator, entra, _ = registry
    context = ssl.create_default_context(cafile=entra.ca_file)
    url = f"https://{emulator.schema_registry_namespace}/$schemaGroups?api-version=2022-10"

    def status(authorization: str) -> tuple[int, dict]:
        request = urllib.request.Request(url, headers={"Authorization": authorization})
        try:
            with urllib.request.urlopen(request, context=context) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as refused:
            return refused.code, json.loads(refused.read())

    token, _ = entra.access_token("registry-app", "https://eventhubs.azure.net/.default")
    assert status(f"Bearer {token}") == (200, {"schemaGroups": ["docs", "shop"]})
    code, body = status("SharedAccessSignature sr=x&sig=y&se=1&skn=k")
    assert code == 401 and "Microsoft Entra ID bearer tokens only" in body["error"]["message"]
    other, _ = entra.access_token("registry-app", "https://storage.azure.com/.default")
    code, body = status(f"Bearer {other}")
    assert code == 401 and "InvalidAudience" in body["error"]["message"]


def test_the_command_line_serves_schema_groups_and_says_where(tmp_path):
    import argparse

    from eventhubs_emulator.__main__ import add_arguments, build

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    emulator = build(parser.parse_args(["--port", "0", "--hub", "h:1", "--schema-registry-port", "0",
                                        "--schema-group", "orders:Avro", "--schema-group", "docs:json"]))  # fmt: skip
    with emulator:
        assert emulator.schema_registry.groups() == ["docs", "orders"]
        assert emulator.schema_registry_namespace.startswith("127.0.0.1:")
    for wrong, says in ((["--schema-group", "orders:Protobuf", "--schema-registry-port", "0"], "Avro, Json or Custom"),
                        (["--schema-group", "orders:Avro"], "needs --schema-registry-port")):  # fmt: skip
        with pytest.raises(ValueError, match=says):
            build(parser.parse_args(["--port", "0", "--hub", "h:1", *wrong]))
