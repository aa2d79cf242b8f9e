// One node-redlock worker for bench_foreign.py: loops lock, hold, unlock on one
// key until a given time, and writes its sections as JSON.
//
//   node foreign_redlock.js <port> <key> <start> <end> <hold s> <think s> <out.json>
//
// <start> and <end> are CLOCK_MONOTONIC seconds (Python's time.monotonic(), which
// process.hrtime shares on Linux), so that the sections of every party can be
// put in one order. Retry settings are node-redlock's own defaults unless
// REDLOCK_RETRY_DELAY / REDLOCK_RETRY_JITTER / REDLOCK_RETRY_COUNT are set.
// A lock() that runs out of retries is simply asked again (and counted).
"use strict";

const fs = require("fs");
const Redis = require("ioredis");
const Redlock = require("redlock");

const [port, key, start, end, hold, think, out] = process.argv.slice(2);
const now = () => Number(process.hrtime.bigint()) / 1e9;
const sleep = (s) => new Promise((resolve) => setTimeout(resolve, Math.max(0, s * 1000)));

function settings() {
  const s = {};
  for (const [env, name] of [
    ["REDLOCK_RETRY_DELAY", "retryDelay"],
    ["REDLOCK_RETRY_JITTER", "retryJitter"],
    ["REDLOCK_RETRY_COUNT", "retryCount"],
  ]) {
    if (process.env[env] !== undefined) s[name] = Number(process.env[env]);
  }
  return s;
}

async function main() {
  const client = new Redis({ port: Number(port), host: "127.0.0.1" });
  const redlock = new Redlock([client], settings());
  redlock.on("clientError", () => {});
  // node-redlock 4 names them lock/unlock, 5 acquire/release
  const take = redlock.acquire
    ? (ttl) => redlock.acquire([key], ttl)
    : (ttl) => redlock.lock(key, ttl);
  const sections = [];
  let giveUps = 0;
  await sleep(Number(start) - now());
  while (now() < Number(end)) {
    let lock;
    try {
      lock = await take(10000);
    } catch (err) {
      giveUps += 1;  // retryCount exhausted: ask again
      continue;
    }
    const began = now();
    await sleep(Number(hold));
    sections.push([began, now()]);
    await (lock.release ? lock.release() : lock.unlock());
    if (Number(think) > 0) await sleep(Number(think));
  }
  fs.writeFileSync(out, JSON.stringify({ sections, give_ups: giveUps, settings: redlock.settings || {
    retryCount: redlock.retryCount, retryDelay: redlock.retryDelay, retryJitter: redlock.retryJitter,
  } }));
  client.disconnect();
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
