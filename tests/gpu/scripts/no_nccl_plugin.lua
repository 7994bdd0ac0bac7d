-- A CUDA plugin built without NCCL (cmake -DDDPLUA_NCCL=OFF, or no NCCL
-- found) keeps CUDA: tensors work on the GPU, nccl_available() says why it
-- is false, backend="nccl" is refused naming the reason, and "auto" picks
-- the cpu group. Prints "no-nccl plugin: ok".
-- Run: DDPLUA_CUDA_PLUGIN=<build without NCCL>/lib/ddplua_cuda.so ddplua tests/gpu/scripts/no_nccl_plugin.lua port=N
local ddp = require "ddplua"
local dist = ddp.distributed
local cfg = ddp.config({ port = 29558 }, { save = false, print = false })

local ok, why = ddp.cuda_is_available()
assert(ok, "CUDA must work without NCCL: " .. tostring(why))
local t = ddp.arange(1, 4, 1, { device = "cuda" })
assert(t:sum():item() == 6 and t:device() == "cuda:0", "a CUDA tensor")
local nccl, reason = dist.nccl_available()
assert(not nccl and tostring(reason):find("built without NCCL", 1, true), "nccl_available: " .. tostring(reason))
local url = "tcp://127.0.0.1:" .. cfg.port
local ok2, err = pcall(dist.init_process_group, { backend = "nccl", init_method = url, world_size = 1, rank = 0 })
assert(not ok2 and tostring(err):find("the CUDA plugin was built without NCCL", 1, true),
       "backend nccl must be refused naming the reason, got: " .. tostring(err))
dist.init_process_group { init_method = url, world_size = 1, rank = 0 }
assert(dist.get_backend() == "cpu", "auto chose " .. dist.get_backend())
local g = ddp.ones(4, { device = "cuda" })
dist.all_reduce(g, "sum") -- the cpu group carries CUDA tensors
assert(g:sum():item() == 4)
dist.destroy_process_group()
print("no-nccl plugin: ok")
