package io.turnaudit.reader;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Properties;

import io.apicurio.registry.serde.SerdeConfig;
import io.apicurio.registry.serde.avro.AvroKafkaDeserializer;
import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * Reads the turn-events topic of a registry-mode deployment (Confluent framing: {@code 00}, the
 * 4-byte big-endian schema id, the Avro body) with Apicurio Registry's own Avro deserializer:
 * the writer schema of each id comes from the registry, nothing of the project but the newest
 * .avsc file (the reader schema) is used.
 *
 * <p>Usage: {@code RegistryReader BOOTSTRAP TOPIC REGISTRY_API_URL READER_AVSC COUNT TIMEOUT_MS},
 * where REGISTRY_API_URL is Apicurio's own API ({@code http://HOST:PORT/apis/registry/v2}).
 * Confluent ids are content ids there: the deserializer is told so ({@code use-id=contentId})
 * and to read 4-byte ids ({@code as-confluent}), from the payload only (no headers).
 *
 * <p>Prints one tab-separated line per message: {@code record PARTITION OFFSET KEY
 * WRITER_FINGERPRINT_HEX BODY_HEX}: the CRC-64-AVRO fingerprint of the writer schema the
 * registry gave for the id the message names (the 8 bytes in wire order, as single-object
 * framing writes them), and the record resolved into the reader schema and re-encoded with it.
 */
public final class RegistryReader {
    private RegistryReader() {}

    public static void main(String[] args) throws IOException {
        if (args.length != 6) {
            System.err.println(
                "usage: RegistryReader BOOTSTRAP TOPIC REGISTRY_API_URL READER_AVSC COUNT TIMEOUT_MS");
            System.exit(2);
        }
        String bootstrap = args[0];
        String topic = args[1];
        String registryUrl = args[2];
        Schema reader = new Schema.Parser().parse(Path.of(args[3]).toFile());
        int count = Integer.parseInt(args[4]);
        long deadline = System.currentTimeMillis() + Long.parseLong(args[5]);

        Properties config = new Properties();
        config.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        config.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        config.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, AvroKafkaDeserializer.class.getName());
        config.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        config.put(SerdeConfig.REGISTRY_URL, registryUrl);
        config.put(SerdeConfig.ENABLE_CONFLUENT_ID_HANDLER, "true");
        config.put(SerdeConfig.USE_ID, "contentId");
        config.put(SerdeConfig.ENABLE_HEADERS, "false");
        try (KafkaConsumer<String, GenericRecord> consumer = new KafkaConsumer<>(config)) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo p : consumer.partitionsFor(topic, Duration.ofSeconds(30))) {
                partitions.add(new TopicPartition(topic, p.partition()));
            }
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            GenericDatumWriter<GenericRecord> out = new GenericDatumWriter<>(reader);
            int seen = 0;
            while (seen < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, GenericRecord> r : consumer.poll(Duration.ofMillis(200))) {
                    Schema writer = r.value().getSchema();
                    GenericRecord resolved = resolve(r.value(), writer, reader);
                    ByteArrayOutputStream body = new ByteArrayOutputStream();
                    BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(body, null);
                    out.write(resolved, encoder);
                    encoder.flush();
                    String key = r.key() == null ? "" : r.key();
                    System.out.println("record\t" + r.partition() + "\t" + r.offset() + "\t" + key
                        + "\t" + fingerprint(writer)
                        + "\t" + HexFormat.of().formatHex(body.toByteArray()));
                    seen++;
                }
            }
            if (seen < count) {
                System.err.println("read " + seen + " of " + count + " records before the timeout");
                System.exit(1);
            }
        }
    }

    /** The record in the writer schema, read into the reader schema by Avro's resolution. */
    private static GenericRecord resolve(GenericRecord record, Schema writer, Schema reader)
            throws IOException {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(bytes, null);
        new GenericDatumWriter<GenericRecord>(writer).write(record, encoder);
        encoder.flush();
        return new GenericDatumReader<GenericRecord>(writer, reader)
            .read(null, DecoderFactory.get().binaryDecoder(bytes.toByteArray(), null));
    }

    /** CRC-64-AVRO of the schema's parsing form, as the 8 little-endian bytes, hex. */
    private static String fingerprint(Schema schema) {
        long fp = SchemaNormalization.parsingFingerprint64(schema);
        byte[] wire = ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(fp).array();
        return HexFormat.of().formatHex(wire);
    }
}
