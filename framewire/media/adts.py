"""AAC as MPEG-TS carries it (ADTS: a header before each frame), copied into MP4, which takes
none: the stream gets the AudioSpecificConfig the headers stand for, and each packet goes without
its header. Used by every copy of a source's packets into MP4 (media.remux's passthrough and clips,
media.video_writer's audio). Without it FFmpeg's mp4 muxer refuses the first such packet (EPERM,
"Malformed AAC bitstream detected") and an SRT, UDP or HLS camera with sound failed at its first
frame.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

import av
import av.container
import av.stream

S = TypeVar("S", bound=av.stream.Stream)

ADTS_RATES = (96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350)
AAC_OBJECTS = {"Main": 1, "LC": 2, "SSR": 3, "LTP": 4}
"""ISO 14496-3 audio object types by FFmpeg's profile names; HE-AAC in ADTS is LC with implicit SBR."""


def adts(stream: av.stream.Stream) -> bool:
    """Whether `stream` is AAC whose packets carry ADTS headers (MPEG-TS: SRT, UDP, HLS), which
    MP4 does not take: no AudioSpecificConfig in its parameters."""
    context = stream.codec_context
    return str(stream.type) == "audio" and context.name == "aac" and not context.extradata


def audio_specific_config(stream: av.stream.Stream) -> bytes:
    """The AudioSpecificConfig an MP4 needs for an ADTS stream, from its parameters (ISO 14496-3
    1.6.2.1): object type, sampling frequency (the core's, for HE-AAC), channel configuration."""
    context: Any = stream.codec_context
    profile = str(context.profile or "LC")
    rate = int(context.sample_rate) // (2 if profile.startswith("HE") else 1)
    channels = int(context.layout.nb_channels)
    config = 7 if channels == 8 else channels if channels <= 6 else 0
    index = [(ADTS_RATES.index(rate), 4)] if rate in ADTS_RATES else [(15, 4), (rate, 24)]
    bits = width = 0
    for value, size in [(AAC_OBJECTS.get(profile, 2), 5), *index, (config, 4), (0, 3)]:
        bits, width = bits << size | value, width + size
    pad = -width % 8
    return (bits << pad).to_bytes((width + pad) // 8, "big")


def without_adts(data: bytes) -> bytes:
    """An AAC packet without its ADTS header (7 bytes, 9 with a CRC), as an MP4 sample holds it."""
    if len(data) > 7 and data[0] == 0xFF and data[1] & 0xF0 == 0xF0:
        return data[7 if data[1] & 1 else 9 :]
    return data


def with_data(packet: av.Packet, data: bytes) -> av.Packet:
    """`packet`'s times and flags around other bytes."""
    out = av.Packet(data)
    out.pts, out.dts, out.duration = packet.pts, packet.dts, packet.duration
    out.time_base, out.is_keyframe = packet.time_base, packet.is_keyframe
    return out


def copy_stream(container: av.container.OutputContainer, template: S) -> S:
    """A stream of `container` with `template`'s parameters; ADTS AAC gets its AudioSpecificConfig
    (its packets then go `without_adts`)."""
    stream = cast(S, container.add_stream_from_template(template))
    if adts(template):
        stream.codec_context.extradata = audio_specific_config(template)
    return stream
