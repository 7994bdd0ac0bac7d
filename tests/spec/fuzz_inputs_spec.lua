-- The mutation fuzzer for YAML run files, CSV image lists and checkpoint
-- metadata (tests/fuzz/inputs.lua has what it does and accepts), bounded for
-- `make test`: 2000 cases per target (~2 s; ~10 s under ASan, which runs
-- these specs against its own build), in a child Lua process with a
-- deadline, so that a crash or a hang fails this spec instead of busted.
-- A long run: DDPLUA_FUZZ_SECONDS=600 (per target) or DDPLUA_FUZZ_ITERATIONS=N,
-- and SEED=N to explore other cases (the failure names seed and case).
local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

describe("fuzzing the input readers", function()
  it("finds no crash, hang or internal error in YAML, CSV and checkpoint metadata", function()
    local seconds = tonumber(os.getenv("DDPLUA_FUZZ_SECONDS") or "")
    local iterations = tonumber(os.getenv("DDPLUA_FUZZ_ITERATIONS") or "") or (not seconds and 2000 or nil)
    local seed = tonumber(os.getenv("SEED") or os.getenv("DDPLUA_FUZZ_SEED") or "") or 1
    local deadline = seconds and (3 * seconds + 300) or 600
    local setup = string.format("package.path = %q; package.cpath = %q", package.path, package.cpath)
    -- the same interpreter and preloaded sanitizer runtime as this busted (make test-asan sets LD_PRELOAD)
    local cmd = string.format("timeout %d lua5.4 -e %s tests/fuzz/inputs.lua seed=%d %s %s 2>&1; echo \"rc=$?\"",
      deadline, q(setup), seed, iterations and ("iterations=" .. iterations) or "",
      seconds and ("seconds=" .. seconds) or "")
    local p = io.popen(cmd)
    local out = p:read("a")
    p:close()
    local rc = tonumber(out:match("rc=(%d+)%s*$"))
    assert.are_not.equal(124, rc, "the fuzzer hung (no answer within " .. deadline .. " s):\n" .. out)
    assert.are.equal(0, rc, out)
    for _, target in ipairs { "yaml", "csv", "checkpoint" } do
      local n = tonumber(out:match("fuzz " .. target .. ": (%d+) cases %(%d+ accepted, %d+ refused%), 0 failures"))
      assert.is_not_nil(n, out)
      if iterations then assert.are.equal(iterations, n) end
      -- both outcomes are exercised: the mutations keep some inputs valid
      assert.is_nil(out:match("fuzz " .. target .. ": %d+ cases %(0 accepted"), out)
    end
    io.stderr:write("\n    [figure] " .. (out:gsub("\nrc=0%s*$", ""):gsub("\n", "\n    [figure] ")) .. "\n")
  end)
end)
