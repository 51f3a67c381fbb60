// A benchmark producer that is libzmq itself (zeromq.js 6.8.0, libzmq 4.3.5 with the draft
// API): a SCATTER (or, for the baseline, a PUSH) sending COUNT copies of a payload file.
//
//   node bench/nodeproducer.js ENDPOINT COUNT scatter|push PAYLOAD_FILE
//
// Like bench/producer.py it connects, prints "ready", and starts sending only when a line
// arrives on stdin, so timing starts at "go". The package is the one tests/zmqjs installs.
"use strict";
const fs = require("fs");
const path = require("path");
const readline = require("readline");

const zeromq = path.join(__dirname, "..", "tests", "zmqjs", "node_modules", "zeromq");
const zmq = require(zeromq);

async function main() {
  const [endpoint, countText, type, payloadFile] = process.argv.slice(2);
  const count = Number(countText);
  if (!endpoint || !Number.isInteger(count) || !["scatter", "push"].includes(type) || !payloadFile) {
    process.stderr.write("usage: node nodeproducer.js ENDPOINT COUNT scatter|push PAYLOAD_FILE\n");
    process.exit(2);
  }
  const message = fs.readFileSync(payloadFile);
  const Socket = type === "scatter" ? require(zeromq + "/draft").Scatter : zmq.Push;
  const socket = new Socket({ sendHighWaterMark: 100000, linger: -1 });
  socket.connect(endpoint);
  process.stdout.write("ready\n");
  const lines = readline.createInterface({ input: process.stdin });
  await new Promise((resolve) => lines.once("line", resolve));
  lines.close();
  for (let i = 0; i < count; i++) {
    await socket.send(message);
  }
  socket.close(); // linger -1: node exits once libzmq has written everything
}

main().catch((error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(1);
});
