"""Unit tests of :mod:`eventhubs_emulator.registry` (the registry's rules; over HTTPS with the official SDK in
``tests/integration``)."""

from __future__ import annotations

import pytest

from eventhubs_emulator.registry import RegistryError, SchemaRegistry, _format_of

AVRO = '{"type": "record", "name": "Reading", "fields": [{"name": "id", "type": "long"}]}'


def test_the_same_content_is_the_same_version_new_content_a_new_one_and_each_found_by_id_and_version():
    registry = SchemaRegistry()
    registry.add_group("Group-1")
    first = registry.register("group-1", "reading", "Avro", AVRO)
    again = registry.register("GROUP-1", "Reading", "Avro", AVRO.replace(": ", ":"))  # spacing does not count
    assert again == first and first.version == 1, "names are case-insensitive; the same schema is not a new version"
    second = registry.register("group-1", "reading", "Avro", AVRO.replace("long", "int"))
    assert second.version == 2 and second.id != first.id
    assert registry.by_id(second.id) == second and registry.version("group-1", "reading", 1) == first
    assert [s.version for s in registry.versions("group-1", "reading")] == [1, 2]
    assert registry.find("group-1", "reading", "Avro", AVRO) == first


@pytest.mark.parametrize(
    "call, status, code",
    [
        (lambda r: r.register("nope", "s", "Avro", AVRO), 404, "GroupNotFound"),
        (lambda r: r.register("g", "s", "Json", "{}"), 415, "InvalidSchemaType"),
        (lambda r: r.register("g", "s", "Avro", "{not json"), 400, "InvalidSchema"),
        (lambda r: r.register("g", "bad name!", "Avro", AVRO), 400, "InvalidSchemaName"),
        (lambda r: r.register("g", "s", "Avro", '"' + "x" * (1024 * 1024) + '"'), 413, "SchemaTooLarge"),
        (lambda r: r.by_id("0" * 32), 404, "ItemNotFound"),
        (lambda r: r.version("g", "missing", 1), 404, "ItemNotFound"),
    ],
)
def test_what_the_service_refuses_is_refused_with_its_status_and_code(call, status, code):
    registry = SchemaRegistry()
    registry.add_group("g", "Avro")
    with pytest.raises(RegistryError) as refused:
        call(registry)
    assert (refused.value.status, refused.value.code) == (status, code)


def test_a_schemas_format_comes_from_its_content_type_as_the_sdks_send_it():
    assert _format_of("application/json; serialization=Avro") == "Avro"
    assert _format_of("application/json;serialization=json") == "Json"
    assert _format_of("text/plain; charset=utf-8") == "Custom"
    with pytest.raises(RegistryError, match="content type 'application/xml'"):
        _format_of("application/xml")
    with pytest.raises(ValueError, match="one of Avro, Json, Custom"):
        SchemaRegistry().add_group("g", "Protobuf")
