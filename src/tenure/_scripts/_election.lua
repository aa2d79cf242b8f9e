-- _election.lua: the leader's record and the change log of an election, for
-- the election_*.lua scripts (included after _common.lua). Not a script of
-- its own.
--
-- The record (a hash): token (the leader's lease token), term (its fence, as
-- the fence key wrote it), label, value (base64 of the proclaimed bytes, ""
-- when none), has ("1" once a value was proclaimed in this term), since (the
-- server's ms when the term was announced), state ("active" until the term
-- ends by a resignation or a loss, then "ended"), op (the id of the last
-- proclaim call, so that the call retried after a lost reply is recognised),
-- end (how an ended term ended: "resigned" or "lost") and, over several
-- masters only, seq (the sequence number of the value within the term: 0
-- until the first proclaim; never lowered within a term).
-- The log (a stream): one entry per change, {event, term, label, value, has,
-- since[, seq]} with event "elected", "proclaimed", "resigned" or "lost"; the
-- entry's id is published on the feed channel. Both keys are kept `keep` ms after
-- their last write, and as long as the term's lease while it is renewed
-- (election_renew.lua); the log's last `max` entries only.

-- What every election script reads first, writing nothing: the holder of the
-- lock key `lock` (its token, or false) and the last term of the fence key
-- `fence` (or false); the record `record` and the log `log` checked to hold
-- a hash and a stream (or nothing). Returns holder, last; or nil and the
-- WRONG_TYPE reply naming a key of another type.
local function election_state(lock, fence, record, log)
  if other_type(record, 'hash') then return nil, {WRONG_TYPE, record} end
  if other_type(log, 'stream') then return nil, {WRONG_TYPE, log} end
  local holder = redis.pcall('GET', lock)
  if wrong(holder) then return nil, {WRONG_TYPE, lock} end
  local last = redis.pcall('GET', fence)
  if wrong(last) or (last and not stored_fence(last)) then return nil, {WRONG_TYPE, fence} end
  return holder, last
end

-- The record `key` as a table of its fields (empty when there is none).
local function election_record(key)
  local flat = redis.call('HGETALL', key)
  local rec = {}
  for i = 1, #flat, 2 do rec[flat[i]] = flat[i + 1] end
  return rec
end

-- Whether `rec` (a record read by election_record) is the term `term` of the
-- lease token `token`, still active.
local function election_active(rec, token, term)
  return rec.state == 'active' and rec.token == token and rec.term == term
end

-- Append the change `event` of the record `rec` to the log and announce it.
local function election_note(log, feed, keep, max, event, rec)
  local fields = {'event', event, 'term', rec.term, 'label', rec.label or '',
    'value', rec.value or '', 'has', rec.has or '0', 'since', rec.since or '0'}
  if rec.seq then
    fields[#fields + 1] = 'seq'
    fields[#fields + 1] = rec.seq
  end
  local id = redis.call('XADD', log, 'MAXLEN', max, '*', unpack(fields))
  redis.call('PEXPIRE', log, keep)
  redis.call('PUBLISH', feed, id)
  return id
end

-- End the record `key` (the table `rec`) with `event` ("resigned" or "lost").
local function election_end(key, log, feed, keep, max, rec, event)
  redis.call('HSET', key, 'state', 'ended', 'end', event)
  redis.call('PEXPIRE', key, keep)
  rec.state = 'ended'
  rec['end'] = event
  return election_note(log, feed, keep, max, event, rec)
end
