-- election_renew.lua: renew a leader's lease, as lock_extend.lua renews a
-- lock's (same keys first, same arguments, same replies), and keep the term's
-- record and log as long as the lease: a term on is never forgotten for want
-- of a write, however long its leader stays quiet (see _election.lua).
--
-- KEYS[1]  lock key      string; value = the leader's lease token
-- KEYS[2]  delay key     string: the lock-delay guard (see lock_acquire.lua)
-- KEYS[3]  fence key     string holding an integer: the last term minted; kept
--                        as long as the lease, and at least ARGV[5] ms
-- KEYS[4]  record key    hash, the leader's record (see _election.lua)
-- KEYS[5]  log key       stream, the change log (see _election.lua)
-- ARGV[1]  token         string; the lease's owner token
-- ARGV[2]  lease         integer MILLISECONDS, > 0
-- ARGV[3]  least left    integer MILLISECONDS, >= 0: refuse when the lease has
--                        less than this left (the holder's clock has given it
--                        up by then; a late renewal must not revive it)
-- ARGV[4]  lock-delay    integer MILLISECONDS, >= 0; 0 = no lock-delay
-- ARGV[5]  fence ttl     integer MILLISECONDS the fence key outlives its last use
-- ARGV[6]  keep          integer MILLISECONDS the record and the log outlive
--                        their last write; here, the renewal (or the lease, if longer)
--
-- Returns  0             OK: the lease now ends ARGV[2] ms from now.
--          {4, late}     NOT_OWNED: not held with this token (expired or
--                        another's; late = 0), or less than ARGV[3] ms were
--                        left (late = 1): nothing was changed.
--          {5, key}      WRONG_TYPE: key holds a value of another type.
--          {9, {perm, name}}  DENIED: the user lacks a permission (see _acl.lua); nothing written.

--@include _common.lua
--@include _acl.lua

--@include _extend.lua
-- the record of this lease's term (a record of another type, or of another
-- term, is left as it is)
if not other_type(KEYS[4], 'hash') and redis.call('HGET', KEYS[4], 'token') == ARGV[1] then
  local keep = math.max(tonumber(ARGV[6]), tonumber(ARGV[2]))
  redis.call('PEXPIRE', KEYS[4], keep)
  redis.call('PEXPIRE', KEYS[5], keep)
end
return 0
