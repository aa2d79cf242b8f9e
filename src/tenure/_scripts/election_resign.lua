-- election_resign.lua: end a leader's term in the record and the log, before
-- its lease is released (fair_release.lua): "resigned" when its token still
-- holds the lock, else "lost" (its lease ended first). A term that is not the
-- record's active one (never announced, or ended already) is left as it is.
--
-- KEYS[1]  lock key     string; value = the leader's lease token
-- KEYS[2]  record key   hash, the leader's record (see _election.lua)
-- KEYS[3]  log key      stream, the change log (see _election.lua)
-- ARGV[1]  token        string; the ending lease's token
-- ARGV[2]  term         string of an integer; its fence
-- ARGV[3]  event        "resigned" (a release) or "lost" (a forced release)
-- ARGV[4]  feed         string; the channel each change's log id is published on
-- ARGV[5]  keep         integer MILLISECONDS the record and the log outlive their last write
-- ARGV[6]  log length   integer > 0: the log keeps this many last entries
--
-- Returns  {1, n}       OK: n = 1 if the term was ended here, 0 if there was nothing to end.
--          {5, key}     WRONG_TYPE: key holds a value of another type; nothing written.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua
--@include _election.lua

if other_type(KEYS[2], 'hash') then return {WRONG_TYPE, KEYS[2]} end
if other_type(KEYS[3], 'stream') then return {WRONG_TYPE, KEYS[3]} end
local holder = redis.pcall('GET', KEYS[1])
if wrong(holder) then return {WRONG_TYPE, KEYS[1]} end
local rec = election_record(KEYS[2])
if not election_active(rec, ARGV[1], ARGV[2]) then return {OK, 0} end
local denied = acl_denied(ARGV[4])
if denied then return {DENIED, denied} end
local event = ARGV[3]
if holder ~= ARGV[1] then event = 'lost' end
election_end(KEYS[2], KEYS[3], ARGV[4], ARGV[5], ARGV[6], rec, event)
return {OK, 1}
