// Sends events with the JavaScript Event Hubs SDK (@azure/event-hubs on rhea: an AMQP implementation
// independent of the Python SDK's) to one partition, as a JavaScript producer of a real user would.
// Usage: node send_events.mjs CONNECTION_STRING HUB PARTITION_ID COUNT
import { EventHubProducerClient } from "@azure/event-hubs";

const [connectionString, hub, partitionId, count] = process.argv.slice(2);
const producer = new EventHubProducerClient(connectionString, hub);
try {
  // One of each kind: text, JSON (the SDK serialises objects), bytes, every property type JavaScript
  // sends, the message's own properties.
  const rich = [
    { body: "plain text" },
    { body: { id: 7, name: "json", nested: [1, 2.5, null] } },
    { body: Buffer.from([0, 1, 2, 255]) },
    {
      body: "with properties",
      properties: { s: "x", n: 42, negative: -3, big: 2 ** 40, f: 1.5, yes: true, no: false,
                    when: new Date(Date.UTC(2026, 0, 2, 3, 4, 5, 678)) },
    },
    { body: "with ids", messageId: "m-1", contentType: "text/plain", correlationId: "c-1" },
  ];
  let batch = await producer.createBatch({ partitionId });
  for (const event of rich) {
    if (!batch.tryAdd(event)) throw new Error("the first batch is full");
  }
  await producer.sendBatch(batch);
  // A producer's stream of alike events: enough for the connector's column-by-column decoder, with
  // integers that change their AMQP encoding as they grow.
  batch = await producer.createBatch({ partitionId });
  for (let i = 0; i < Number(count); i++) {
    const event = { body: `event-${i}`, properties: { i, big: 2 ** 33 + i, ratio: i / 3, tag: `t${i % 5}` } };
    if (!batch.tryAdd(event)) {
      await producer.sendBatch(batch);
      batch = await producer.createBatch({ partitionId });
      if (!batch.tryAdd(event)) throw new Error("an event larger than a batch");
    }
  }
  await producer.sendBatch(batch);
  // A partition key (the hub has one partition, so it lands there too)
  await producer.sendBatch([{ body: "keyed" }], { partitionKey: "device-9" });
} finally {
  await producer.close();
}
