-- election_read.lua: read an election: its lock's holder and lease left, the
-- last term minted, the leader's record and the log entries after a given id.
-- A record still active whose token no longer holds the lock (its lease
-- expired, or was taken) is ended first and logged "lost", so that every
-- reader sees the same changes; a user not allowed to write skips that step
-- (the reply still shows the holder, and the reader tells).
--
-- KEYS[1]  lock key     string; value = the leader's lease token
-- KEYS[2]  fence key    string holding an integer: the last term minted
-- KEYS[3]  record key   hash, the leader's record (see _election.lua)
-- KEYS[4]  log key      stream, the change log (see _election.lua)
-- ARGV[1]  after        a log entry id: the entries after it are returned; "" for none
-- ARGV[2]  count        integer > 0: at most this many entries
-- ARGV[3]  feed         string; the channel each change's log id is published on
-- ARGV[4]  keep         integer MILLISECONDS the record and the log outlive their last write
-- ARGV[5]  log length   integer > 0: the log keeps this many last entries
--
-- Returns  {1, {holder, pttl, term, record, entries, tail}}  OK: holder = the
--                       lock's token ("" when free), pttl = its PTTL (ms; -2
--                       free), term = the last term minted (0: none), record =
--                       the record's fields and values (flat), entries = the log
--                       entries after ARGV[1] ({id, {field, value, ...}}, oldest
--                       first), tail = the log's last entry id ("" when none).
--          {5, key}     WRONG_TYPE: key holds a value of another type; nothing written.

--@include _common.lua
--@include _acl.lua
--@include _election.lua

local holder, last = election_state(KEYS[1], KEYS[2], KEYS[3], KEYS[4])
if holder == nil then return last end
local rec = election_record(KEYS[3])
if rec.state == 'active' and rec.token ~= holder and not acl_denied(ARGV[3]) then
  election_end(KEYS[3], KEYS[4], ARGV[3], ARGV[4], ARGV[5], rec, 'lost')
end
local entries = {}
if ARGV[1] ~= '' then
  entries = redis.call('XRANGE', KEYS[4], '(' .. ARGV[1], '+', 'COUNT', ARGV[2])
end
local tail = redis.call('XREVRANGE', KEYS[4], '+', '-', 'COUNT', 1)[1]
return {OK, {
  holder or '', redis.call('PTTL', KEYS[1]), last or '0', redis.call('HGETALL', KEYS[3]),
  entries, tail and tail[1] or '',
}}
