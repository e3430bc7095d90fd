// MQTT.js against a running XMQ broker: one scenario, a JSON report on stdout.
//
//   node interop.mjs '{"url": "ws://127.0.0.1:1234/mqtt", "version": 5, "uid": "t1", "ca": null}'
//
// The Python test (tests/integration/interop/test_mqttjs.py) starts the broker, runs this and
// asserts on the report; this script only observes (it throws only on a timeout or an error).
import { readFileSync } from "node:fs";
import mqtt from "mqtt";

const args = JSON.parse(process.argv[2]);
const { url, version, uid } = args;
const TIMEOUT_MS = 10000;

function options(extra) {
  const base = { protocolVersion: version, reconnectPeriod: 0, connectTimeout: TIMEOUT_MS };
  if (args.ca) {
    base.ca = readFileSync(args.ca);
    base.rejectUnauthorized = false; // the test certificate names no host
  }
  return { ...base, ...extra };
}

function withTimeout(promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timeout: ${what}`)), TIMEOUT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function connect(clientId, extra = {}) {
  const client = await withTimeout(
    mqtt.connectAsync(url, options({ clientId, ...extra })),
    `connect ${clientId}`,
  );
  return client;
}

/** Resolve with the messages received on `client` once `count` have come (or after `waitMs`). */
function collect(client, count, waitMs = TIMEOUT_MS) {
  const got = [];
  return new Promise((resolve) => {
    const done = () => {
      client.removeListener("message", onMessage);
      resolve(got);
    };
    const timer = setTimeout(done, waitMs);
    function onMessage(topic, payload, packet) {
      got.push({
        topic,
        payload: payload.toString(),
        qos: packet.qos,
        retain: packet.retain,
        properties: packet.properties || null,
      });
      if (got.length >= count) {
        clearTimeout(timer);
        done();
      }
    }
    client.on("message", onMessage);
  });
}

// The acks each client received, by packet id (publishAsync resolves with the sent packet).
const acksSeen = new WeakMap();
function recordAcks(client) {
  const seen = new Map();
  acksSeen.set(client, seen);
  client.on("packetreceive", (packet) => {
    if (packet.cmd === "puback" || packet.cmd === "pubrec") {
      seen.set(packet.messageId, { cmd: packet.cmd, reasonCode: packet.reasonCode ?? 0 });
    }
  });
  return client;
}

/** The PUBACK (QoS 1) or PUBREC (QoS 2) of a publish; null for QoS 0. */
function ackReason(client, packet) {
  if (!packet || !packet.messageId) return null;
  return acksSeen.get(client).get(packet.messageId) ?? { cmd: "none", reasonCode: -1 };
}

async function published(client, topic, payload, opts, what) {
  return ackReason(client, await withTimeout(client.publishAsync(topic, payload, opts), what));
}

const report = { url, version };
const v5 = version === 5;

// -- subscribe and publish at QoS 0/1/2 ---------------------------------------------------------
const sub = await connect(`${uid}-sub`, { clean: true });
report.subscribeGranted = (await sub.subscribeAsync(`${uid}/q/#`, { qos: 2 })).map((g) => g.qos);
const pub = recordAcks(await connect(`${uid}-pub`, { clean: true }));
const received = collect(sub, 3);
const acks = [];
for (const qos of [0, 1, 2]) {
  const props = v5 ? { properties: { userProperties: { from: "mqtt.js" } } } : {};
  acks.push(await published(pub, `${uid}/q/${qos}`, `m${qos}`, { qos, ...props }, `qos ${qos}`));
}
report.publishAcks = acks;
report.received = (await received).map((m) => ({
  topic: m.topic,
  payload: m.payload,
  qos: m.qos,
  userProperties: m.properties ? m.properties.userProperties || null : null,
}));

// -- retained: set, seen by a new subscriber, cleared with an empty payload -----------------------
report.retainSetAck = await published(pub, `${uid}/r`, "keep", { qos: 1, retain: true }, "set");
const late = await connect(`${uid}-late`, { clean: true });
const lateGot = collect(late, 1);
await late.subscribeAsync(`${uid}/r`, { qos: 1 });
report.retainedSeen = (await lateGot).map((m) => ({ payload: m.payload, retain: m.retain }));
await late.endAsync();
// The empty payload: MQTT.js writes it as its own zero-length WebSocket message.
const clears = [];
for (let n = 0; n < 6; n++) {
  clears.push(await published(pub, `${uid}/r`, "", { qos: 1, retain: true }, `clear ${n}`));
}
report.retainClearAcks = clears;
const after = await connect(`${uid}-after`, { clean: true });
const afterGot = collect(after, 1, 1000);
await after.subscribeAsync(`${uid}/r`, { qos: 1 });
report.retainedAfterClear = (await afterGot).map((m) => m.payload);
await after.endAsync();

// -- will: published when the connection drops without DISCONNECT --------------------------------
const willGot = collect(sub, 1);
await sub.subscribeAsync(`${uid}/will`, { qos: 1 });
const dying = await connect(`${uid}-dying`, {
  clean: true,
  will: { topic: `${uid}/will`, payload: Buffer.from("gone"), qos: 1, retain: false },
});
dying.stream.destroy(); // no DISCONNECT: the will goes out
report.will = (await willGot).map((m) => ({ topic: m.topic, payload: m.payload }));
dying.end(true);

// -- session resume: a persistent session keeps its subscription and queued messages ------------
const persistent = v5
  ? { clean: false, properties: { sessionExpiryInterval: 300 } }
  : { clean: false };
const first = await connect(`${uid}-persist`, { ...persistent });
report.firstSessionPresent = first.connackPacket?.sessionPresent ?? null;
await first.subscribeAsync(`${uid}/p`, { qos: 1 });
await first.endAsync();
report.offlineAck = await published(pub, `${uid}/p`, "queued", { qos: 1 }, "offline");
const resumed = mqtt.connect(url, options({ clientId: `${uid}-persist`, ...persistent }));
const resumedGot = collect(resumed, 1);
const connack = await withTimeout(
  new Promise((resolve, reject) => {
    resumed.once("connect", resolve);
    resumed.once("error", reject);
  }),
  "resume",
);
report.resumedSessionPresent = connack.sessionPresent;
report.resumedMessages = (await resumedGot).map((m) => ({ payload: m.payload, qos: m.qos }));
await resumed.endAsync();

await pub.endAsync();
await sub.endAsync();
process.stdout.write(JSON.stringify(report) + "\n");
process.exit(0);
