-- nn.F: the functional forms of the modules (PyTorch's torch.nn.functional).
-- Each is the runtime op of the same name; dims are 1-based.
local ddp = require "ddplua"

local F = {}

-- the activations (activation.lua's ops and F): F.relu(x), F.leaky_relu(x, negative_slope), F.gelu(x, "tanh"), ...
for name, fn in pairs(require("ddplua.nn.activation").F) do F[name] = fn end
function F.softmax(x, dim) return ddp.softmax(x, dim) end
function F.log_softmax(x, dim) return ddp.log_softmax(x, dim) end
function F.flatten(x, start_dim, end_dim) return x:flatten(start_dim, end_dim) end

--- linear(x, w [, b [, "relu"]]): the last argument fuses the activation.
function F.linear(x, w, b, act) return ddp.linear(x, w, b, act) end
--- PyTorch's positional order: conv2d(x, w, b, stride, padding, dilation, groups),
--- max_pool2d(x, k, stride, padding, dilation, ceil_mode), avg_pool2d(x, k, stride, padding, ceil_mode,
--- count_include_pad = true, divisor_override)
function F.conv2d(x, w, b, stride, padding, dilation, groups)
  return ddp.conv2d(x, w, b, stride or 1, padding or 0, dilation or 1, groups or 1)
end
--- conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation): PyTorch's order (groups before
--- dilation)
function F.conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation)
  return ddp.conv_transpose2d(x, w, b, stride or 1, padding or 0, output_padding or 0, groups or 1, dilation or 1)
end
function F.max_pool2d(x, k, stride, padding, dilation, ceil_mode)
  return ddp.max_pool2d(x, k, stride or k, padding or 0, dilation or 1, ceil_mode or false)
end
function F.avg_pool2d(x, k, stride, padding, ceil_mode, count_include_pad, divisor_override)
  return ddp.avg_pool2d(x, k, stride or k, padding or 0, ceil_mode or false, count_include_pad ~= false,
    divisor_override)
end

function F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)
  return ddp.batch_norm(x, running_mean, running_var, weight, bias, training or false, momentum or 0.1, eps or 1e-5)
end

function F.layer_norm(x, normalized_shape, weight, bias, eps)
  return ddp.layer_norm(x, normalized_shape, weight, bias, eps or 1e-5)
end

--- dropout(x, p = 0.5, training = true), PyTorch's defaults.
function F.dropout(x, p, training)
  if training == nil then training = true end
  return ddp.dropout(x, p or 0.5, training)
end

--- dropout2d(x, p = 0.5, training = true): whole channels (nn/dropout2d.lua).
function F.dropout2d(x, p, training) return require("ddplua.nn.dropout2d").dropout2d(x, p, training) end
--- dropout3d(x, p = 0.5, training = true): whole channels of [N, C, D, H, W] (nn/dropout2d.lua).
function F.dropout3d(x, p, training) return require("ddplua.nn.dropout2d").dropout3d(x, p, training) end

function F.embedding(ids, weight, padding_idx) return ddp.embedding(ids, weight, padding_idx) end

--- scaled_dot_product_attention(q, k, v [, {attn_mask=, is_causal=, dropout_p=, scale=}]): one fused op
--- (flash attention's tiled online softmax; a bool mask's true takes part, a float one is added).
function F.scaled_dot_product_attention(q, k, v, opts) return ddp.core.scaled_dot_product_attention(q, k, v, opts) end
--- self_attention_qkv(qkv, n_head [, {is_causal=, dropout_p=, scale=}]): qkv [B, T, 3C] as Linear(C, 3C) gives
--- it (q, k, v side by side) to [B, T, C]: the split into n_head heads, scaled_dot_product_attention and the
--- merge of nanoGPT's attention as one op on the CPU (no copies; ops/attention_qkv.c), composed elsewhere.
function F.self_attention_qkv(qkv, n_head, opts)
  if qkv:device() == "cpu" then return ddp.core.self_attention_qkv(qkv, n_head, opts) end
  return F.self_attention_qkv_composed(qkv, n_head, opts)
end
--- self_attention_qkv_composed: the same from the unfused ops (split, heads as transposed views,
--- scaled_dot_product_attention, merge), what other devices run; the same numbers on the CPU, bit for bit.
function F.self_attention_qkv_composed(qkv, n_head, opts)
  local shape = qkv:size()
  if #shape ~= 3 or shape[3] % 3 ~= 0 then
    error(string.format("self_attention_qkv: qkv must be [batch, length, 3 * embed] (q, k and v side by side), " ..
      "got shape [%s]", table.concat(shape, ", ")), 2)
  end
  local B, T, C = shape[1], shape[2], shape[3] // 3
  if math.type(n_head) ~= "integer" or n_head < 1 or C % n_head ~= 0 then
    error(string.format("self_attention_qkv: n_head must be a positive divisor of the embedding size %d, got %s", C,
      tostring(n_head)), 2)
  end
  local q, k, v = qkv:split(C, 3)
  local function heads(t) return t:view(B, T, n_head, C // n_head):transpose(2, 3) end
  local y = ddp.core.scaled_dot_product_attention(heads(q), heads(k), heads(v), opts)
  return y:transpose(2, 3):reshape(B, T, C)
end
--- adaptive_avg_pool2d(x, output_size): output_size n or {h, w}.
function F.adaptive_avg_pool2d(x, output_size) return ddp.core.adaptive_avg_pool2d(x, output_size) end

--- cross_entropy(logits, target [, {weight=, reduction=, label_smoothing=, ignore_index=}]), nll_loss(logp, target
--- [, {weight=, reduction=, ignore_index=}])
function F.cross_entropy(input, target, opts) return ddp.cross_entropy(input, target, opts) end
function F.nll_loss(input, target, opts) return ddp.nll_loss(input, target, opts) end
function F.mse_loss(input, target, opts) return ddp.mse_loss(input, target, opts) end

--- the losses composed in Lua (nn/loss_more.lua): binary_cross_entropy(p, y [, {weight=, reduction=}]),
--- binary_cross_entropy_with_logits(x, y [, {weight=, reduction=, pos_weight=}]), l1_loss, smooth_l1_loss ({beta=}),
--- huber_loss ({delta=}), kl_div(logq, p [, {reduction=, log_target=}]) ("batchmean" too)
local more = require "ddplua.nn.loss_more"
function F.binary_cross_entropy(input, target, opts) return more.binary_cross_entropy(input, target, opts) end
function F.binary_cross_entropy_with_logits(input, target, opts)
  return more.binary_cross_entropy_with_logits(input, target, opts)
end
function F.l1_loss(input, target, opts) return more.l1_loss(input, target, opts) end
function F.smooth_l1_loss(input, target, opts) return more.smooth_l1_loss(input, target, opts) end
function F.huber_loss(input, target, opts) return more.huber_loss(input, target, opts) end
function F.kl_div(input, target, opts) return more.kl_div(input, target, opts) end

-- the functional forms of the families of modules (nn/families.lua)
for _, family in ipairs(require "ddplua.nn.families") do
  for name, fn in pairs(require(family).F) do F[name] = fn end
end

return F
