// The Java Event Hubs SDK 5.x as a peer of the connector (issue 47), run by tests/integration/test_java_sdk.py as a
// single-file program: java -cp '.jvm/sdk-lib/*' tests/jvm/Peer.java VERB ARGS...
//
//   send CONN HUB PARTITION ALIKE       rich events (a property of every type the Java SDK sends), ALIKE alike
//                                       events, to PARTITION; then one event with a partition key
//   receive CONN HUB PARTITION COUNT    COUNT events of PARTITION from its start, one JSON line each
//   process CONN HUB STORAGE CONTAINER PARTITIONS OUT
//                                       an EventProcessorClient (balanced, blob checkpoint store) that writes
//                                       "event PARTITION SEQUENCE BODY" per event (checkpointed each), "claim P" and
//                                       "close P REASON" to OUT, until its standard input closes; then it stops.
//                                       Its owner id is the SDK's own (a UUID): "started ID" tells it
//
// CONN is a namespace connection string (no EntityPath). Nothing here is the connector's code: it is what a Java
// team sharing a hub and a consumer group with a Spark query would write.
import com.azure.messaging.eventhubs.CheckpointStore;
import com.azure.messaging.eventhubs.EventData;
import com.azure.messaging.eventhubs.EventDataBatch;
import com.azure.messaging.eventhubs.EventHubClientBuilder;
import com.azure.messaging.eventhubs.EventHubConsumerClient;
import com.azure.messaging.eventhubs.EventHubProducerClient;
import com.azure.messaging.eventhubs.EventProcessorClient;
import com.azure.messaging.eventhubs.EventProcessorClientBuilder;
import com.azure.messaging.eventhubs.LoadBalancingStrategy;
import com.azure.messaging.eventhubs.checkpointstore.blob.BlobCheckpointStore;
import com.azure.messaging.eventhubs.models.CreateBatchOptions;
import com.azure.messaging.eventhubs.models.EventPosition;
import com.azure.messaging.eventhubs.models.PartitionEvent;
import com.azure.storage.blob.BlobContainerAsyncClient;
import com.azure.storage.blob.BlobServiceClientBuilder;

import java.io.FileWriter;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Date;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;

public class Peer {
    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "send" -> send(args[1], args[2], args[3], Integer.parseInt(args[4]));
            case "receive" -> receive(args[1], args[2], args[3], Integer.parseInt(args[4]));
            case "process" -> process(args[1], args[2], args[3], args[4], Integer.parseInt(args[5]), args[6]);
            default -> throw new IllegalArgumentException("unknown verb " + args[0]);
        }
        System.exit(0); // the SDK's reactor threads are not daemons
    }

    static void send(String conn, String hub, String partition, int alike) {
        EventHubProducerClient producer = new EventHubClientBuilder().connectionString(conn, hub).buildProducerClient();
        try {
            List<EventData> events = new ArrayList<>();
            EventData typed = new EventData("with properties".getBytes(StandardCharsets.UTF_8));
            Map<String, Object> p = typed.getProperties();
            p.put("s", "x");
            p.put("i", 42);
            p.put("negative", -3);
            p.put("l", 1L << 40);
            p.put("short", (short) 7);
            p.put("byte", (byte) -2);
            p.put("d", 1.5d);
            p.put("f", 0.25f);
            p.put("yes", true);
            p.put("no", false);
            p.put("c", 'z');
            p.put("uuid", UUID.fromString("12345678-1234-5678-1234-567812345678"));
            p.put("when", new Date(1767323045678L));
            events.add(typed);
            EventData ids = new EventData(new byte[] {0, 1, 2, (byte) 255});
            ids.setMessageId("m-1");
            ids.setCorrelationId("c-1");
            ids.setContentType("application/octet-stream");
            events.add(ids);
            events.add(new EventData("{\"id\":7,\"name\":\"json\"}"));
            for (int i = 0; i < alike; i++) {
                EventData e = new EventData("event-" + i);
                e.getProperties().put("i", i);
                e.getProperties().put("big", (1L << 33) + i);
                e.getProperties().put("tag", "t" + (i % 5));
                events.add(e);
            }
            sendAll(producer, events, new CreateBatchOptions().setPartitionId(partition));
            sendAll(producer, List.of(new EventData("keyed")), new CreateBatchOptions().setPartitionKey("device-9"));
        } finally {
            producer.close();
        }
    }

    static void sendAll(EventHubProducerClient producer, List<EventData> events, CreateBatchOptions options) {
        EventDataBatch batch = producer.createBatch(options);
        for (EventData e : events) {
            if (!batch.tryAdd(e)) {
                producer.send(batch);
                batch = producer.createBatch(options);
                if (!batch.tryAdd(e)) {
                    throw new IllegalStateException("an event larger than a batch");
                }
            }
        }
        if (batch.getCount() > 0) {
            producer.send(batch);
        }
    }

    static void receive(String conn, String hub, String partition, int count) {
        EventHubConsumerClient consumer = new EventHubClientBuilder().connectionString(conn, hub)
            .consumerGroup(EventHubClientBuilder.DEFAULT_CONSUMER_GROUP_NAME).buildConsumerClient();
        try {
            int seen = 0;
            long next = 0;
            while (seen < count) {
                EventPosition from = seen == 0 ? EventPosition.earliest() : EventPosition.fromSequenceNumber(next);
                for (PartitionEvent pe : consumer.receiveFromPartition(partition, count - seen, from,
                        Duration.ofSeconds(10))) {
                    EventData e = pe.getData();
                    System.out.println(json(e));
                    next = e.getSequenceNumber() + 1;
                    seen++;
                }
            }
        } finally {
            consumer.close();
        }
    }

    static String json(EventData e) {
        StringBuilder props = new StringBuilder("{");
        for (Map.Entry<String, Object> entry : e.getProperties().entrySet()) {
            if (props.length() > 1) {
                props.append(',');
            }
            Object v = entry.getValue();
            String shown = v instanceof byte[] b ? Base64.getEncoder().encodeToString(b) : String.valueOf(v);
            props.append(quote(entry.getKey())).append(':').append(quote(shown));
        }
        props.append('}');
        return "{\"sequenceNumber\":" + e.getSequenceNumber()
            + ",\"body\":" + quote(Base64.getEncoder().encodeToString(e.getBody()))
            + ",\"partitionKey\":" + (e.getPartitionKey() == null ? "null" : quote(e.getPartitionKey()))
            + ",\"properties\":" + props + "}";
    }

    static String quote(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }

    static void process(String conn, String hub, String storage, String container, int partitions, String out)
            throws IOException {
        BlobContainerAsyncClient blobs = new BlobServiceClientBuilder().connectionString(storage)
            .buildAsyncClient().getBlobContainerAsyncClient(container);
        CheckpointStore store = new BlobCheckpointStore(blobs);
        Map<String, EventPosition> earliest = new HashMap<>();
        for (int i = 0; i < partitions; i++) {
            earliest.put(String.valueOf(i), EventPosition.earliest());
        }
        PrintWriter log = new PrintWriter(new FileWriter(out, StandardCharsets.UTF_8, true), true);
        EventProcessorClient processor = new EventProcessorClientBuilder()
            .connectionString(conn, hub)
            .consumerGroup(EventHubClientBuilder.DEFAULT_CONSUMER_GROUP_NAME)
            .checkpointStore(store)
            .loadBalancingStrategy(LoadBalancingStrategy.BALANCED)
            .loadBalancingUpdateInterval(Duration.ofSeconds(2))
            .partitionOwnershipExpirationInterval(Duration.ofSeconds(10))
            .initialPartitionEventPosition(earliest)
            .processPartitionInitialization(ctx -> log.println("claim " + ctx.getPartitionContext().getPartitionId()))
            .processPartitionClose(ctx -> log.println("close " + ctx.getPartitionContext().getPartitionId() + " "
                + ctx.getCloseReason()))
            .processEvent(ctx -> {
                EventData e = ctx.getEventData();
                log.println("event " + ctx.getPartitionContext().getPartitionId() + " " + e.getSequenceNumber() + " "
                    + e.getBodyAsString());
                ctx.updateCheckpoint();
            })
            .processError(ctx -> log.println("error " + ctx.getPartitionContext().getPartitionId() + " "
                + ctx.getThrowable()))
            .buildEventProcessorClient();
        processor.start();
        log.println("started " + processor.getIdentifier());
        while (System.in.read() != -1) {
            // until the test closes our standard input
        }
        processor.stop();
        log.println("stopped " + processor.getIdentifier());
        log.close();
    }
}
