"""Media I/O with PyAV and OpenCV, below both stages and engines: reading a video into BGR frames
with their timestamps (`framewire.media.video_reader`) and writing BGR frames as H.264 with the source's
audio (`framewire.media.video_writer`). No processes, no sockets, no models here."""
