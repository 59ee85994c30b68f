package io.turnaudit.reader;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.SchemaStore;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * Reads one turn-audit topic with nothing of the project but its .avsc files and
 * the schemas topic.
 *
 * <p>Usage: {@code TopicReader BOOTSTRAP SCHEMAS_TOPIC TOPIC AVSC_DIR RECORD_NAME COUNT TIMEOUT_MS}
 *
 * <p>Prints tab-separated lines:
 * <ul>
 *   <li>{@code avsc FILE FINGERPRINT_HEX SIGNED_LONG}: each shipped version, added to the decoder;
 *   <li>{@code schema KEY FULL_NAME}: each writer schema announced on the schemas topic;
 *   <li>{@code record PARTITION OFFSET KEY WRITER_FINGERPRINT_HEX BODY_HEX}: each message, decoded
 *       into the newest shipped version and re-encoded with it (Avro binary, hex).
 * </ul>
 */
public final class TopicReader {
    private static final Pattern VERSIONED = Pattern.compile("(.+)\\.v(\\d+)\\.avsc");

    private TopicReader() {}

    /** The schemas topic's key: the 8 header bytes as hex, i.e. the little-endian long. */
    static long keyToFingerprint(String hex) {
        return ByteBuffer.wrap(HexFormat.of().parseHex(hex)).order(ByteOrder.LITTLE_ENDIAN).getLong();
    }

    static String fingerprintToKey(long fingerprint) {
        byte[] wire = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(fingerprint).array();
        return HexFormat.of().formatHex(wire);
    }

    public static void main(String[] args) throws IOException {
        if (args.length != 7) {
            System.err.println(
                "usage: TopicReader BOOTSTRAP SCHEMAS_TOPIC TOPIC AVSC_DIR RECORD_NAME COUNT TIMEOUT_MS");
            System.exit(2);
        }
        String bootstrap = args[0];
        String schemasTopic = args[1];
        String topic = args[2];
        Path avscDir = Path.of(args[3]);
        String recordName = args[4];
        int count = Integer.parseInt(args[5]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[6]);

        // Every shipped version of the record, oldest first; the newest is the reader schema.
        Map<Integer, Schema> shipped = new java.util.TreeMap<>();
        Map<Integer, String> files = new HashMap<>();
        try (Stream<Path> entries = Files.list(avscDir)) {
            for (Path file : (Iterable<Path>) entries::iterator) {
                Matcher m = VERSIONED.matcher(file.getFileName().toString());
                if (m.matches() && m.group(1).equals(recordName)) {
                    int version = Integer.parseInt(m.group(2));
                    shipped.put(version, new Schema.Parser().parse(file.toFile()));
                    files.put(version, file.getFileName().toString());
                }
            }
        }
        if (shipped.isEmpty()) {
            System.err.println("no " + recordName + ".v*.avsc in " + avscDir);
            System.exit(2);
        }
        Schema reader = ((java.util.TreeMap<Integer, Schema>) shipped).lastEntry().getValue();

        Map<Long, Schema> announced = new HashMap<>();
        SchemaStore fromTopic = announced::get;
        BinaryMessageDecoder<GenericRecord> decoder =
            new BinaryMessageDecoder<>(GenericData.get(), reader, fromTopic);
        for (Map.Entry<Integer, Schema> version : shipped.entrySet()) {
            decoder.addSchema(version.getValue());
            long fp = SchemaNormalization.parsingFingerprint64(version.getValue());
            System.out.println(
                "avsc\t" + files.get(version.getKey()) + "\t" + fingerprintToKey(fp) + "\t" + fp);
        }

        Properties config = new Properties();
        config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(config)) {
            // The schemas topic, whole: key = fingerprint hex, value = writer schema JSON.
            List<TopicPartition> schemaPartitions = partitions(consumer, schemasTopic);
            consumer.assign(schemaPartitions);
            consumer.seekToBeginning(schemaPartitions);
            Map<TopicPartition, Long> end = consumer.endOffsets(schemaPartitions);
            while (!caughtUp(consumer, end) && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    if (r.key() == null || r.value() == null) {
                        continue; // a tombstone names no schema
                    }
                    String key = new String(r.key(), StandardCharsets.US_ASCII);
                    Schema writer = new Schema.Parser().parse(new String(r.value(), StandardCharsets.UTF_8));
                    announced.put(keyToFingerprint(key), writer);
                    System.out.println("schema\t" + key + "\t" + writer.getFullName());
                }
            }

            List<TopicPartition> dataPartitions = partitions(consumer, topic);
            consumer.assign(dataPartitions);
            consumer.seekToBeginning(dataPartitions);
            GenericDatumWriter<GenericRecord> writer = new GenericDatumWriter<>(reader);
            int seen = 0;
            while (seen < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    byte[] value = r.value();
                    // Bytes 2..9 of the single-object header: the writer's fingerprint as sent.
                    String writerKey = HexFormat.of().formatHex(value, 2, 10);
                    GenericRecord record = decoder.decode(value);
                    ByteArrayOutputStream body = new ByteArrayOutputStream();
                    BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(body, null);
                    writer.write(record, encoder);
                    encoder.flush();
                    String key = r.key() == null ? "" : new String(r.key(), StandardCharsets.UTF_8);
                    System.out.println("record\t" + r.partition() + "\t" + r.offset() + "\t" + key
                        + "\t" + writerKey + "\t" + HexFormat.of().formatHex(body.toByteArray()));
                    seen++;
                }
            }
            if (seen < count) {
                System.err.println("read " + seen + " of " + count + " records before the timeout");
                System.exit(1);
            }
        }
    }

    private static List<TopicPartition> partitions(KafkaConsumer<byte[], byte[]> consumer, String topic) {
        List<TopicPartition> found = new ArrayList<>();
        for (PartitionInfo p : consumer.partitionsFor(topic, Duration.ofSeconds(30))) {
            found.add(new TopicPartition(topic, p.partition()));
        }
        return found;
    }

    private static boolean caughtUp(KafkaConsumer<byte[], byte[]> consumer, Map<TopicPartition, Long> end) {
        for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
            if (consumer.position(e.getKey()) < e.getValue()) {
                return false;
            }
        }
        return true;
    }
}
