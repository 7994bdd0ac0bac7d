-- Faults across processes and the network:
--  * kill -9 of a rank in the middle of a collective ends the job within
--    10 s, the host's summary names that rank, and no process and no
--    shared-memory segment is left behind;
--  * a 2-node job whose nodes sit in two network namespaces joined by a
--    veth pair: the TCP path between the nodes crosses a real interface
--    (skipped, saying why, where namespaces cannot be made).
local BIN = os.getenv("DDPLUA_BIN") or "./build/bin/ddplua"

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function sh(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  local ok, _, code = p:close()
  return out, ok, code
end

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p " .. q(d)))
  return d
end

local function read(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

describe("faults", function()
  it("kill -9 of a rank inside a collective ends the job within 10 s, naming it, leaving nothing behind", function()
    local dir = tmpdir()
    local abs_bin = BIN:sub(1, 1) == "/" and BIN or (io.popen("pwd"):read("l") .. "/" .. BIN:gsub("^%./", ""))
    local script = [[
cd %s
%s --nproc 2 %s %s >out 2>err &
host=$!
n=0; while [ ! -s pid ]; do sleep 0.02; n=$((n+1)); [ $n -gt 1500 ] && break; done
sleep 0.2
t0=$(date +%%s%%N)
kill -9 $(cat pid)
( sleep 30; kill -9 $host ) 2>/dev/null & watchdog=$!
wait $host; rc=$?
t1=$(date +%%s%%N)
kill $watchdog 2>/dev/null
echo "$rc $(( (t1 - t0) / 1000000 ))"
]]
    local out = sh(script:format(q(dir), q(abs_bin), q(io.popen("pwd"):read("l") .. "/tests/mp/scripts/kill_in_collective.lua"), q(dir)))
    local rc, ms = out:match("(%d+) (%d+)")
    assert.is_not_nil(rc, out)
    assert.are.equal(128 + 9, tonumber(rc), read(dir .. "/err"))
    assert.is_true(tonumber(ms) < 10000, "the job took " .. ms .. " ms to end")
    local err = read(dir .. "/err")
    local pid = read(dir .. "/pid")
    assert.matches("rank 1 %(pid " .. pid .. "%) was killed by signal 9", err)
    -- no rank process left (the script name is unique to this test)
    assert.are.equal("", sh("pgrep -f 'kill_in_collectiv[e]' || true"))
    local token = read(dir .. "/token")
    assert.is_truthy(token and #token > 0)
    assert.are.equal("", sh("ls /dev/shm | grep -F " .. q(token) .. " || true"), "shared-memory segments left")
    os.execute("rm -rf " .. q(dir))
  end)

  describe("two network namespaces joined by veth", function()
    local ns = { "ddplua_ns0_" .. os.time() % 100000, "ddplua_ns1_" .. os.time() % 100000 }
    local why
    setup(function()
      if sh("id -u"):match("^(%d+)") ~= "0" then
        why = "not root"
        return
      end
      local _, ok = sh("command -v ip")
      if not ok then
        why = "the ip command (iproute2) is missing"
        return
      end
      local cmds = {
        "ip netns add " .. ns[1], "ip netns add " .. ns[2],
        "ip link add ddpv0 type veth peer name ddpv1",
        "ip link set ddpv0 netns " .. ns[1], "ip link set ddpv1 netns " .. ns[2],
        "ip -n " .. ns[1] .. " addr add 10.213.0.1/24 dev ddpv0",
        "ip -n " .. ns[2] .. " addr add 10.213.0.2/24 dev ddpv1",
        "ip -n " .. ns[1] .. " link set ddpv0 up", "ip -n " .. ns[2] .. " link set ddpv1 up",
        "ip -n " .. ns[1] .. " link set lo up", "ip -n " .. ns[2] .. " link set lo up",
      }
      for _, c in ipairs(cmds) do
        local out, ok = sh(c)
        if not ok then
          why = "cannot create network namespaces here (`" .. c .. "`: " .. out:gsub("\n", " ") .. ")"
          return
        end
      end
    end)
    teardown(function()
      os.execute("ip netns del " .. ns[1] .. " 2>/dev/null; ip netns del " .. ns[2] .. " 2>/dev/null")
    end)

    it("all_reduce crosses the veth link between the two nodes' hosts", function()
      if why then
        pending("skipped: " .. why)
        return
      end
      local script = io.popen("pwd"):read("l") .. "/tests/mp/scripts/netns_allreduce.lua"
      local abs_bin = BIN:sub(1, 1) == "/" and BIN or (io.popen("pwd"):read("l") .. "/" .. BIN:gsub("^%./", ""))
      local common = " --nnodes 2 --master_addr 10.213.0.1 --master_port 29611 --timeout 60 "
      local cmd = string.format("(export DDPLUA_JOB_TOKEN=faults-spec-0123456789abcdef; " ..
        "ip netns exec %s %s%s--node_rank 1 --nproc 1 %s > %s 2>&1 & " ..
        "ip netns exec %s %s%s--node_rank 0 --nproc 1 %s; wait)", ns[2], q(abs_bin), common, q(script),
        "/tmp/ddplua_netns_node1.log", ns[1], q(abs_bin), common, q(script))
      local out, ok = sh(cmd)
      local node1 = read("/tmp/ddplua_netns_node1.log") or ""
      os.remove("/tmp/ddplua_netns_node1.log")
      assert.is_true(ok, out .. node1)
      assert.matches("rank 0 node 0 sum 3.0 3.0", out)
      assert.matches("rank 1 node 1 sum 3.0 3.0", node1)
      -- the bytes went through the veth interface, not loopback
      local rx = tonumber(sh("ip -n " .. ns[1] .. " -s link show ddpv0 | awk '/RX:/{getline; print $1}'"):match("%d+"))
      assert.is_true(rx ~= nil and rx > 4 * 1000003, "only " .. tostring(rx) .. " bytes crossed ddpv0")
    end)
  end)
end)
