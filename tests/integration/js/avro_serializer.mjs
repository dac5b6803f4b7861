// The JavaScript Schema Registry Avro serializer (@azure/schema-registry-avro on @azure/schema-registry), as a
// JavaScript producer or consumer of a real user would run it, against the emulator's registry.
// Usage: node avro_serializer.mjs REQUEST_FILE
//   {"op": "serialize", "registry": "https://host:port", "group": "shop", "schema": "...", "values": [...]}
//     prints [{"data": base64, "contentType": "avro/binary+<id>"}, ...]
//   {"op": "deserialize", "registry": "https://host:port", "messages": [{"data": base64, "contentType": ...}]}
//     prints the values
// Signs in with ClientSecretCredential from AZURE_TENANT_ID, AZURE_CLIENT_ID, AZURE_CLIENT_SECRET and
// AZURE_AUTHORITY_HOST; trusts the emulator's CA through NODE_EXTRA_CA_CERTS.
import { readFileSync } from "node:fs";
import { ClientSecretCredential } from "@azure/identity";
import { SchemaRegistryClient } from "@azure/schema-registry";
import { AvroSerializer } from "@azure/schema-registry-avro";

const request = JSON.parse(readFileSync(process.argv[2], "utf8"));
const credential = new ClientSecretCredential(
  process.env.AZURE_TENANT_ID, process.env.AZURE_CLIENT_ID, process.env.AZURE_CLIENT_SECRET,
  { authorityHost: process.env.AZURE_AUTHORITY_HOST, disableInstanceDiscovery: true },
);
const client = new SchemaRegistryClient(request.registry, credential);
const serializer = new AvroSerializer(client, { groupName: request.group, autoRegisterSchemas: true });
const out = [];
if (request.op === "serialize") {
  for (const value of request.values) {
    const message = await serializer.serialize(value, request.schema);
    out.push({ data: Buffer.from(message.data).toString("base64"), contentType: message.contentType });
  }
} else {
  for (const message of request.messages) {
    const value = await serializer.deserialize({ data: Buffer.from(message.data, "base64"), contentType: message.contentType });
    out.push(value);
  }
}
process.stdout.write(JSON.stringify(out));
