-- election_announce.lua: the leader of an election announces its term
-- ("elected") or publishes a value ("proclaimed"), fenced by its lease: only
-- the lease token that holds the election's lock, with the term the fence key
-- holds, may write. The record and the log are written in the same call (see
-- _election.lua) and the change is published on the feed channel. A term
-- announced while the record still shows an earlier active term first logs
-- that term as lost (its lease ended unannounced: expired or taken).
--
-- Over several independent masters (ARGV[10] given: a RedlockElection) the
-- term is the largest fence the leader's quorum minted, which may be above
-- this master's: the lease token holding the lock is enough, and this master's
-- fence is raised to the term first (and kept `keep` ms, as the record), so
-- that every later grant here mints a larger term. A proclaim carries its sequence number within the term: one
-- whose number the record holds already (or a larger one) writes nothing.
--
-- KEYS[1]  lock key     string; value = the leader's lease token
-- KEYS[2]  fence key    string holding an integer: the last term minted
-- KEYS[3]  record key   hash, the leader's record (see _election.lua)
-- KEYS[4]  log key      stream, the change log (see _election.lua)
-- ARGV[1]  token        string; the caller's lease token
-- ARGV[2]  term         string of an integer; the caller's lease fence
-- ARGV[3]  event        "elected" or "proclaimed"
-- ARGV[4]  label        string; who the leader is, for people
-- ARGV[5]  value        string; base64 of the value proclaimed ("elected": unused)
-- ARGV[6]  feed         string; the channel each change's log id is published on
-- ARGV[7]  keep         integer MILLISECONDS the record and the log outlive their last write
-- ARGV[8]  log length   integer > 0: the log keeps this many last entries
-- ARGV[9]  op           string; this proclaim call's id (a retry of the call sends the
--                       same): a proclaim whose id the record holds was made already
-- ARGV[10] seq          (several masters only) string of an integer >= 0: the
--                       value's sequence number in the term ("elected": 0); ""
--                       or absent on one server
--
-- Returns  {1, n}       OK: n = 1 if something was written, 0 for an "elected"
--                       already announced or a proclaim already made (a retry).
--          {4, 0}       NOT_OWNED: the lock is not held with this token, or (on
--                       one server) the term is not the last minted, or the
--                       record has this term ended already; nothing written.
--          {5, key}     WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua
--@include _election.lua

local holder, last = election_state(KEYS[1], KEYS[2], KEYS[3], KEYS[4])
if holder == nil then return last end
local seq = ARGV[10] or ''
if holder ~= ARGV[1] or (seq == '' and (not last or tonumber(last) ~= tonumber(ARGV[2]))) then
  return {NOT_OWNED, 0}
end
local denied = acl_denied(ARGV[6])
if denied then return {DENIED, denied} end

local keep, max = ARGV[7], ARGV[8]
if seq ~= '' then
  -- the fence key is kept at least as long as the record (and as long as a
  -- fence minted here): terms stay above this one however long the election
  -- then stays idle
  if not last then
    redis.call('SET', KEYS[2], ARGV[2], 'PX', keep)
  else
    if tonumber(last) < tonumber(ARGV[2]) then redis.call('SET', KEYS[2], ARGV[2], 'KEEPTTL') end
    local pttl = redis.call('PTTL', KEYS[2])
    if pttl >= 0 and pttl < tonumber(keep) then redis.call('PEXPIRE', KEYS[2], keep) end
  end
end
local rec = election_record(KEYS[3])
if rec.token ~= ARGV[1] or rec.term ~= ARGV[2] then
  if rec.state == 'active' then election_end(KEYS[3], KEYS[4], ARGV[6], keep, max, rec, 'lost') end
  rec = {
    token = ARGV[1], term = ARGV[2], label = ARGV[4], value = '', has = '0',
    since = string.format('%.0f', math.floor(now_us() / 1000)), state = 'active',
  }
  redis.call('DEL', KEYS[3])
  redis.call('HSET', KEYS[3], 'token', rec.token, 'term', rec.term, 'label', rec.label,
    'value', '', 'has', '0', 'since', rec.since, 'state', 'active')
  if seq ~= '' then
    rec.seq = '0'
    redis.call('HSET', KEYS[3], 'seq', '0')
  end
  election_note(KEYS[4], ARGV[6], keep, max, 'elected', rec)
elseif rec.state ~= 'active' then
  -- this very term ended already (its resignation came before the release,
  -- which an interrupt may cut off): the lease no longer leads; refused, but
  -- for the retry of a proclaim made before the end
  if ARGV[9] ~= '' and rec.op == ARGV[9] then return {OK, 0} end
  return {NOT_OWNED, 0}
elseif ARGV[3] == 'elected' then
  return {OK, 0}
end
if ARGV[3] == 'proclaimed' then
  if ARGV[9] ~= '' and rec.op == ARGV[9] then return {OK, 0} end
  if seq ~= '' and tonumber(rec.seq or '0') >= tonumber(seq) then return {OK, 0} end
  rec.value, rec.has, rec.label = ARGV[5], '1', ARGV[4]
  redis.call('HSET', KEYS[3], 'value', rec.value, 'has', '1', 'label', rec.label, 'op', ARGV[9])
  if seq ~= '' then
    rec.seq = seq
    redis.call('HSET', KEYS[3], 'seq', seq)
  end
  election_note(KEYS[4], ARGV[6], keep, max, 'proclaimed', rec)
end
redis.call('PEXPIRE', KEYS[3], keep)
return {OK, 1}
