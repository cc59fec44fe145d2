// The warm process's program: Python, kept in the binary so that `trun`
// stays one self-contained file for script entrypoints.
//
// trun starts `python -u -c kWarmBootstrap MODULE...` with one end of a unix
// socket as its stdin, then sends kWarmServer on it as one frame. The
// program imports the modules, says it is ready, then answers requests
// (warm_protocol.h):
// each is read by a spare child forked ahead of it, which forks the worker
// and exits, so the worker is reparented to trun (a child subreaper) before
// it runs any user code; the answer is the worker's pid.
#pragma once

namespace trun::proc {

extern const char kWarmBootstrap[];
extern const char kWarmServer[];

}  // namespace trun::proc
