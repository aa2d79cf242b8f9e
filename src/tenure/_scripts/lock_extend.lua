-- lock_extend.lua: reset a held lease to expire ARGV[2] ms from now.
--
-- KEYS[1]  lock key      string; value = the holder's owner token
-- KEYS[2]  delay key     string: the lock-delay guard (see lock_acquire.lua)
-- KEYS[3]  fence key     string holding an integer: the last fence minted; kept
--                        as long as the lease, and at least ARGV[5] ms
-- ARGV[1]  token         string; the lease's owner token
-- ARGV[2]  lease         integer MILLISECONDS, > 0
-- ARGV[3]  least left    integer MILLISECONDS, >= 0: refuse when the lease has
--                        less than this left (the holder's clock has given it
--                        up by then; a late renewal must not revive it)
-- ARGV[4]  lock-delay    integer MILLISECONDS, >= 0; 0 = no lock-delay
-- ARGV[5]  fence ttl     integer MILLISECONDS the fence key outlives its last use
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
return 0
