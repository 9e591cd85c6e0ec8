import os

# OpenCV 5 warns on every FaceDetectorYN it creates (the reference detector of the e2e tests).
os.environ.setdefault("OPENCV_LOG_LEVEL", "ERROR")
