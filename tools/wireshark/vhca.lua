-- SPDX-License-Identifier: MIT OR Apache-2.0
-- vhca.lua: Wireshark/tshark dissector for vhca's native InfiniBand over UDP
-- (issue 28 item 4; ARCHITECTURE.md §6 and §9).
--
--   tshark -X lua_script:tools/wireshark/vhca.lua -r underlay.pcap
--   (or copy it into ~/.local/lib/wireshark/plugins/)
--
-- A capture of the underlay (`tcpdump -i lo -w underlay.pcap udp`) then shows
-- InfiniBand: each IB packet (LRH through VCRC) goes to Wireshark's own
-- "infiniband" dissector, and vhca's framing around it gets fields here.
--
-- What a vhca UDP datagram holds (device/src/fabric):
--
--   keepalive      the 8 bytes "VHCAlive" (fabric/liveness.rs), never tagged
--   flow control   a 6-byte IBA 7.9.4 link packet: Op (4 bits), FCTBS (12),
--                  VL (4), FCCL (12), LPCRC (CRC-16 over the first 4 bytes,
--                  big endian; transport/src/flow/packet.rs), never tagged.
--                  Dissected here: Wireshark 4.0's "infiniband_link" reads an
--                  LRH's LIDs past the six bytes of a bare link packet (it
--                  expects ERF's framing) and reports every one malformed.
--   IB packet      LRH .. ICRC .. VCRC, LRH:PktLen * 4 + 2 bytes (the VCRC,
--                  little endian, is outside PktLen)
--   keyed packet   the IB packet, then the fabric key's trailer
--                  (fabric/auth.rs): a sequence number (8 bytes, big endian,
--                  the sender's clock in ns since the Unix epoch) and a 16-byte
--                  keyed BLAKE3 tag. The tag is shown, not verified: that
--                  needs the fabric key.
--
-- UDP GSO (fabric/udp.rs): a run of same-size packets to one peer is one send,
-- and where the device offloads it (loopback does) a capture shows the whole
-- run as one UDP datagram: segments of the first one's size, the last one
-- possibly shorter. Each segment is dissected on its own.
--
-- Registered on the UDP ports of the preference "vhca.udp_ports" (default: the
-- ports of examples/*.toml and of `vhca topology`'s default --base-port), and
-- as a heuristic on UDP (the test driver's fabrics use free ports): the
-- heuristic takes a datagram only when every segment checks (a keepalive's
-- exact bytes, a link packet's LPCRC, an IB packet's LVer, LNH, PktLen and
-- VCRC), so it does not claim other protocols' traffic. On a registered port
-- a datagram that does not parse is shown as malformed, and a bad CRC as an
-- expert warning.

local vhca = Proto("vhca", "vhca native InfiniBand over UDP")

local KIND_IB = 1
local KIND_KEEPALIVE = 2
local KIND_FLOW = 3
local kinds = {
    [KIND_IB] = "InfiniBand packet",
    [KIND_KEEPALIVE] = "Keepalive",
    [KIND_FLOW] = "Flow control (IBA 7.9.4 link packet)",
}

local KEEPALIVE = "VHCAlive"
local FC_LEN = 6
local SEQ_LEN = 8
local TAG_LEN = 16
local TRAILER_LEN = SEQ_LEN + TAG_LEN
-- LRH + BTH + ICRC + VCRC (device/src/fabric/mod.rs MIN_PACKET_LEN).
local MIN_IB_LEN = 8 + 12 + 4 + 2

local f = {
    kind = ProtoField.uint8("vhca.kind", "Kind", base.DEC, kinds),
    segments = ProtoField.uint16("vhca.segments", "Packets in the datagram (UDP GSO)", base.DEC),
    ib_len = ProtoField.uint16("vhca.ib_len", "InfiniBand packet length", base.DEC),
    vcrc_good = ProtoField.bool("vhca.vcrc_good", "VCRC good"),
    keyed = ProtoField.bool("vhca.keyed", "Fabric key trailer"),
    trailer = ProtoField.bytes("vhca.trailer", "Fabric key trailer"),
    seq = ProtoField.uint64("vhca.trailer.seq", "Sequence number", base.DEC),
    seq_time = ProtoField.absolute_time("vhca.trailer.seq_time", "Sequence number as the sender's clock",
        base.UTC),
    tag = ProtoField.bytes("vhca.trailer.tag", "Tag (keyed BLAKE3, not verified)"),
    keepalive = ProtoField.string("vhca.keepalive", "Keepalive"),
    fc_op = ProtoField.uint8("vhca.fc.op", "Op", base.DEC, { [0] = "Normal", [1] = "Init" }, 0xf0),
    fc_fctbs = ProtoField.uint16("vhca.fc.fctbs", "FCTBS (blocks sent, mod 4096)", base.DEC, nil, 0x0fff),
    fc_vl = ProtoField.uint8("vhca.fc.vl", "VL", base.DEC, nil, 0xf0),
    fc_fccl = ProtoField.uint16("vhca.fc.fccl", "FCCL (credit limit, mod 4096)", base.DEC, nil, 0x0fff),
    fc_lpcrc = ProtoField.uint16("vhca.fc.lpcrc", "LPCRC", base.HEX),
    fc_lpcrc_good = ProtoField.bool("vhca.fc.lpcrc_good", "LPCRC good"),
}
vhca.fields = {}
for _, v in pairs(f) do table.insert(vhca.fields, v) end

local ef = {
    malformed = ProtoExpert.new("vhca.malformed", "Not a vhca datagram: no keepalive, link packet or IB packet fits",
        expert.group.MALFORMED, expert.severity.ERROR),
    bad_vcrc = ProtoExpert.new("vhca.bad_vcrc", "VCRC does not match the packet",
        expert.group.CHECKSUM, expert.severity.WARN),
    bad_lpcrc = ProtoExpert.new("vhca.bad_lpcrc", "LPCRC does not match the link packet",
        expert.group.CHECKSUM, expert.severity.WARN),
}
vhca.experts = { ef.malformed, ef.bad_vcrc, ef.bad_lpcrc }

vhca.prefs.udp_ports = Pref.range("UDP ports", "18515-18530,30000-30063",
    "UDP ports dissected as vhca (the heuristic finds the others)", 65535)

local ib_handle = Dissector.get("infiniband")

-- The VCRC's CRC-16 (IBA 7.8.2): polynomial 0x100B reflected (0xD008),
-- initial value 0xFFFF, final inversion; transport/src/wire/crc.rs.
local crc16_table = {}
for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
        if bit.band(c, 1) ~= 0 then
            c = bit.bxor(bit.rshift(c, 1), 0xd008)
        else
            c = bit.rshift(c, 1)
        end
    end
    crc16_table[i] = c
end

local function crc16(tvb, off, len)
    local bytes = tvb:raw(off, len)
    local c = 0xffff
    for i = 1, len do
        c = bit.bxor(bit.rshift(c, 8), crc16_table[bit.band(bit.bxor(c, bytes:byte(i)), 0xff)])
    end
    return bit.bxor(c, 0xffff)
end

local function vcrc_good(tvb, off, iblen)
    local got = tvb(off + iblen - 2, 2):le_uint()
    return crc16(tvb, off, iblen - 2) == got
end

-- The LPCRC goes least significant byte first, as the VCRC (one CRC-16 and
-- one serialisation for both, IBA 7.8.2 and 7.9.4.2).
local function lpcrc_good(tvb, off)
    return crc16(tvb, off, 4) == tvb(off + 4, 2):le_uint()
end

-- The IB packet length the LRH at `off` announces, or nil when the bytes
-- there cannot be one of vhca's packets: LVer 0 (IBA 7.7.3) and LNH 2 or 3
-- (IBA local or global transport: vhca sends nothing else), PktLen covering
-- at least the headers and fitting in `avail` bytes.
local function ib_len_at(tvb, off, avail)
    if avail < MIN_IB_LEN then return nil end
    local b0 = tvb(off, 1):uint()
    local b1 = tvb(off + 1, 1):uint()
    if bit.band(b0, 0x0f) ~= 0 then return nil end
    local lnh = bit.band(b1, 0x03)
    if lnh ~= 2 and lnh ~= 3 then return nil end
    local iblen = bit.band(tvb(off + 4, 2):uint(), 0x7ff) * 4 + 2
    if iblen < MIN_IB_LEN or iblen > avail then return nil end
    return iblen
end

-- One segment of `len` bytes at `off`: its kind and, for an IB packet, its
-- length and whether a trailer follows; nil if it is none of them. `strict`
-- (the heuristic) also wants the CRCs to match.
local function classify(tvb, off, len, strict)
    if len == FC_LEN then
        local op = bit.rshift(tvb(off, 1):uint(), 4)
        local vl = bit.rshift(tvb(off + 2, 1):uint(), 4)
        if op > 1 or vl == 15 then return nil end
        if strict and not lpcrc_good(tvb, off) then return nil end
        return { kind = KIND_FLOW, len = len }
    end
    local iblen = ib_len_at(tvb, off, len)
    if iblen == nil then return nil end
    local keyed
    if iblen == len then
        keyed = false
    elseif iblen + TRAILER_LEN == len then
        keyed = true
    else
        return nil
    end
    if strict and not vcrc_good(tvb, off, iblen) then return nil end
    return { kind = KIND_IB, len = len, iblen = iblen, keyed = keyed }
end

-- The segments of a datagram (fabric/udp.rs `messages`: every one as long as
-- the first, the last possibly shorter), or nil if it is not vhca's.
local function segments(tvb, strict)
    local total = tvb:len()
    if total == #KEEPALIVE and tvb:raw(0, total) == KEEPALIVE then
        return { { kind = KIND_KEEPALIVE, len = total, off = 0 } }
    end
    -- The first segment's size: a link packet's, or an IB packet's with or
    -- without a trailer; the candidate that splits the whole datagram wins.
    local sizes = { FC_LEN }
    local iblen = ib_len_at(tvb, 0, total)
    if iblen ~= nil then
        table.insert(sizes, iblen)
        table.insert(sizes, iblen + TRAILER_LEN)
    end
    for _, size in ipairs(sizes) do
        if size <= total then
            local segs = {}
            local off = 0
            while off < total do
                local len = math.min(size, total - off)
                local s = classify(tvb, off, len, strict)
                if s == nil then
                    segs = nil
                    break
                end
                s.off = off
                table.insert(segs, s)
                off = off + len
            end
            if segs ~= nil then return segs end
        end
    end
    return nil
end

local function dissect_segment(tvb, pinfo, root, s)
    local t = root:add(vhca, tvb(s.off, s.len))
    t:add(f.kind, s.kind):set_generated()
    if s.kind == KIND_KEEPALIVE then
        t:set_text("vhca keepalive")
        t:add(f.keepalive, tvb(s.off, s.len))
        return "keepalive"
    elseif s.kind == KIND_FLOW then
        local r = tvb(s.off, FC_LEN)
        t:set_text("vhca flow control (IBA 7.9.4)")
        t:add(f.fc_op, r(0, 1))
        t:add(f.fc_fctbs, r(0, 2))
        t:add(f.fc_vl, r(2, 1))
        t:add(f.fc_fccl, r(2, 2))
        t:add_le(f.fc_lpcrc, r(4, 2))
        local good = lpcrc_good(tvb, s.off)
        t:add(f.fc_lpcrc_good, good):set_generated()
        if not good then t:add_proto_expert_info(ef.bad_lpcrc) end
        return "flow control"
    end
    t:add(f.ib_len, s.iblen):set_generated()
    local good = vcrc_good(tvb, s.off, s.iblen)
    t:add(f.vcrc_good, good):set_generated()
    if not good then t:add_proto_expert_info(ef.bad_vcrc) end
    t:add(f.keyed, s.keyed):set_generated()
    if s.keyed then
        local at = s.off + s.iblen
        t:set_text("vhca InfiniBand packet, fabric key trailer")
        local tt = t:add(f.trailer, tvb(at, TRAILER_LEN))
        local seq = tvb(at, SEQ_LEN):uint64()
        tt:add(f.seq, tvb(at, SEQ_LEN))
        local secs = (seq / 1000000000):tonumber()
        local ns = (seq % 1000000000):tonumber()
        tt:add(f.seq_time, tvb(at, SEQ_LEN), NSTime(secs, ns)):set_generated()
        tt:add(f.tag, tvb(at + SEQ_LEN, TAG_LEN))
    else
        t:set_text("vhca InfiniBand packet")
    end
    ib_handle:call(tvb(s.off, s.iblen):tvb(), pinfo, root)
    return nil
end

local function dissect(tvb, pinfo, root, segs)
    local texts = {}
    for _, s in ipairs(segs) do
        local text = dissect_segment(tvb, pinfo, root, s)
        if text ~= nil then table.insert(texts, text) end
    end
    if #segs > 1 then
        root:add(f.segments, #segs):set_generated()
    end
    -- The infiniband dissector names IB packets; link packets get ours.
    if #texts == #segs then
        pinfo.cols.protocol = "vhca"
        pinfo.cols.info = "vhca " .. table.concat(texts, ", ")
    end
end

function vhca.dissector(tvb, pinfo, root)
    local segs = segments(tvb, false)
    if segs == nil then
        local t = root:add(vhca, tvb())
        t:add_proto_expert_info(ef.malformed)
        pinfo.cols.protocol = "vhca"
        pinfo.cols.info = "vhca: unknown datagram of " .. tvb:len() .. " bytes"
        return tvb:len()
    end
    dissect(tvb, pinfo, root, segs)
    return tvb:len()
end

local function heuristic(tvb, pinfo, root)
    local segs = segments(tvb, true)
    if segs == nil then return false end
    dissect(tvb, pinfo, root, segs)
    pinfo.conversation = vhca
    return true
end

local registered = nil
local function register_ports()
    local udp = DissectorTable.get("udp.port")
    if registered ~= nil then udp:remove(registered, vhca) end
    registered = vhca.prefs.udp_ports
    udp:add(registered, vhca)
end

function vhca.prefs_changed()
    register_ports()
end

register_ports()
vhca:register_heuristic("udp", heuristic)
