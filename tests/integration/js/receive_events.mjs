// Receives COUNT events from the start of one partition with the JavaScript Event Hubs SDK and prints
// each as a line of JSON (body as base64 when it arrives as bytes), then exits.
// Usage: node receive_events.mjs CONNECTION_STRING HUB PARTITION_ID COUNT
import { EventHubConsumerClient, earliestEventPosition } from "@azure/event-hubs";

const [connectionString, hub, partitionId, count] = process.argv.slice(2);
const client = new EventHubConsumerClient("$Default", connectionString, hub);
const got = [];
await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error(`received ${got.length} of ${count} events in 60 s`)), 60000);
  const subscription = client.subscribe(
    partitionId,
    {
      processEvents: async (events) => {
        got.push(...events);
        if (got.length >= Number(count)) {
          clearTimeout(timer);
          await subscription.close();
          resolve();
        }
      },
      processError: async (err) => reject(err),
    },
    // bodies as the bytes they are (the SDK would otherwise parse what looks like JSON)
    { startPosition: earliestEventPosition, maxBatchSize: 500, skipParsingBodyAsJson: true },
  );
});
await client.close();
for (const event of got) {
  const body = Buffer.isBuffer(event.body) ? { base64: event.body.toString("base64") } : { value: event.body };
  console.log(JSON.stringify({
    body, sequenceNumber: event.sequenceNumber, partitionKey: event.partitionKey ?? null,
    properties: event.properties ?? {},
  }));
}
