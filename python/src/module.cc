// ferry._ferry: the compiled half of the Python package. It converts arguments, releases the GIL
// around every call that can block or copy (transfers, waits, registration, open, probe, copies)
// and turns a non-OK Status into the matching ferry.FerryError subclass (ferry/_errors.py).
// The Python layers (ferry/mooncake.py, ferry/engine.py) are built on it; it is not meant to be
// used directly.
//
// Thread contract: an Engine may be used from many Python threads at once (PyEngine is
// thread-safe); Python objects are touched only with the GIL held.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "ferry/metrics.h"
#include "ferry/options.h"
#include "ferry/status.h"
#include "ferry/transfer_engine.h"
#include "ferry/version.h"
#include "py_engine.h"

namespace py = pybind11;

namespace ferry::python {
namespace {

// A non-OK Status on its way to Python; the translator below raises it as a FerryError.
class StatusError : public std::exception {
 public:
  explicit StatusError(Status status) : status_(std::move(status)) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return status_.message().c_str(); }

 private:
  Status status_;
};

void Check(const Status& status) {
  if (!status.ok()) throw StatusError(status);
}

template <typename T>
T Unwrap(Result<T> result) {
  if (!result.ok()) throw StatusError(result.status());
  return std::move(result).value();
}

// Raises the FerryError subclass of `status` (built by ferry._errors.error_from_status).
void RaiseStatus(const Status& status) {
  try {
    py::object make = py::module_::import("ferry._errors").attr("error_from_status");
    py::object error = make(std::string(StatusCodeName(status.code())), status.message());
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  } catch (py::error_already_set& e) {
    e.restore();
  }
}

std::chrono::milliseconds Ms(int64_t ms, const char* what) {
  if (ms <= 0) Check(InvalidArgumentError(std::string(what) + " must be > 0 ms"));
  return std::chrono::milliseconds(ms);
}

// EngineOptions from a dict of its field names (durations in milliseconds, with an "_ms"
// suffix). An unknown key or a value of the wrong type is InvalidArgument naming it.
EngineOptions OptionsFromDict(const py::dict& d) {
  EngineOptions o;
  for (const auto& [key_obj, value] : d) {
    const std::string key = py::str(key_obj);
    try {
      if (key == "metadata_conn") {
        o.metadata_conn = value.cast<std::string>();
      } else if (key == "local_server_name") {
        o.local_server_name = value.cast<std::string>();
      } else if (key == "host") {
        o.host = value.cast<std::string>();
      } else if (key == "rpc_port") {
        o.rpc_port = value.cast<uint16_t>();
      } else if (key == "rpc_port_range_end") {
        o.rpc_port_range_end = value.cast<uint16_t>();
      } else if (key == "transports") {
        o.transports = value.cast<std::vector<std::string>>();
      } else if (key == "host_id") {
        o.host_id = value.cast<std::string>();
      } else if (key == "shm_dir") {
        o.shm_dir = value.cast<std::string>();
      } else if (key == "cxl_window") {
        o.cxl_window = value.cast<std::string>();
      } else if (key == "cxl_window_size") {
        o.cxl_window_size = value.cast<uint64_t>();
      } else if (key == "rdma_provider") {
        o.rdma_provider = value.cast<std::string>();
      } else if (key == "rdma_devices") {
        o.rdma_devices = value.cast<std::vector<std::string>>();
      } else if (key == "task_timeout_ms") {
        o.task_timeout = Ms(value.cast<int64_t>(), "task_timeout_ms");
      } else if (key == "request_timeout_ms") {
        o.request_timeout = Ms(value.cast<int64_t>(), "request_timeout_ms");
      } else if (key == "lease_ttl_ms") {
        o.lease_ttl = Ms(value.cast<int64_t>(), "lease_ttl_ms");
      } else if (key == "segment_cache_ttl_ms") {
        o.segment_cache_ttl = Ms(value.cast<int64_t>(), "segment_cache_ttl_ms");
      } else if (key == "unregister_drain_timeout_ms") {
        o.unregister_drain_timeout = Ms(value.cast<int64_t>(), "unregister_drain_timeout_ms");
      } else if (key == "idle_link_timeout_ms") {
        o.idle_link_timeout = std::chrono::milliseconds(value.cast<int64_t>());
      } else if (key == "slice_size") {
        o.slice_size = value.cast<uint64_t>();
      } else if (key == "tcp_payload_checksum") {
        o.tcp_payload_checksum = value.cast<bool>();
      } else if (key == "metadata_prefix") {
        o.metadata_prefix = value.cast<std::string>();
      } else if (key == "max_pending_notifies") {
        o.max_pending_notifies = value.cast<size_t>();
      } else if (key == "max_pending_notify_bytes") {
        o.max_pending_notify_bytes = value.cast<uint64_t>();
      } else if (key == "auth_secret") {
        o.auth_secret = value.cast<std::string>();
      } else if (key == "worker_threads") {
        o.worker_threads = value.cast<size_t>();
      } else if (key == "max_segment_buffers") {
        o.max_segment_buffers = value.cast<size_t>();
      } else if (key == "metrics_port") {
        o.metrics_port = value.cast<int32_t>();
      } else if (key == "metrics_host") {
        o.metrics_host = value.cast<std::string>();
      } else if (key == "metrics_max_peers") {
        o.metrics_max_peers = value.cast<size_t>();
      } else if (key == "file_queue_depth") {
        o.file_queue_depth = value.cast<uint32_t>();
      } else if (key == "file_direct_io") {
        o.file_direct_io = value.cast<bool>();
      } else if (key == "log_level") {
        o.log_level = value.cast<std::string>();
      } else {
        Check(InvalidArgumentError("unknown engine option '" + key + "'"));
      }
    } catch (const py::cast_error&) {
      Check(InvalidArgumentError("engine option '" + key + "': wrong type " +
                                 std::string(py::str(py::type::of(value)))));
    }
  }
  return o;
}

// Seconds on the steady clock (time.monotonic()'s clock on Linux), None for "not yet".
py::object Seconds(std::chrono::steady_clock::time_point t) {
  if (t == std::chrono::steady_clock::time_point{}) return py::none();
  return py::float_(std::chrono::duration<double>(t.time_since_epoch()).count());
}

py::object ErrorTuple(const Status& s) {
  if (s.ok()) return py::none();
  return py::make_tuple(std::string(StatusCodeName(s.code())), s.message());
}

py::dict BatchDict(const BatchStatus& b) {
  py::dict d;
  d["state"] = std::string(TransferStateName(b.state));
  d["tasks"] = b.tasks;
  d["completed"] = b.completed;
  d["failed"] = b.failed;
  d["transferred_bytes"] = b.transferred_bytes;
  d["error"] = ErrorTuple(b.first_error);
  return d;
}

py::dict TaskDict(const TransferStatus& t) {
  py::dict d;
  d["state"] = std::string(TransferStateName(t.state));
  d["transferred_bytes"] = t.transferred_bytes;
  d["error"] = ErrorTuple(t.reason);
  d["transport"] = t.transport;
  d["submitted_at"] = Seconds(t.submitted_at);
  d["started_at"] = Seconds(t.started_at);
  d["ended_at"] = Seconds(t.ended_at);
  d["retries"] = t.retries;
  d["slice_size"] = t.slice_size;
  d["file_io"] = t.file_io;
  return d;
}

// (opcode, local address, target segment id, remote address, length, transport[, sync]) tuples,
// as the Python layers build them (sync: TransferRequest::sync, for writes to file buffers;
// false when left out).
using RequestTuple = std::tuple<int, uint64_t, uint64_t, uint64_t, uint64_t, std::string>;
using SyncRequestTuple = std::tuple<int, uint64_t, uint64_t, uint64_t, uint64_t, std::string, bool>;
using AnyRequestTuple = std::variant<RequestTuple, SyncRequestTuple>;

std::vector<TransferRequest> Requests(const std::vector<AnyRequestTuple>& tuples) {
  std::vector<TransferRequest> out;
  out.reserve(tuples.size());
  for (const AnyRequestTuple& any : tuples) {
    const SyncRequestTuple t =
        std::holds_alternative<SyncRequestTuple>(any)
            ? std::get<SyncRequestTuple>(any)
            : std::tuple_cat(std::get<RequestTuple>(any), std::make_tuple(false));
    const auto& [op, local, target, remote, length, transport, sync] = t;
    if (op != static_cast<int>(OpCode::kRead) && op != static_cast<int>(OpCode::kWrite)) {
      Check(
          InvalidArgumentError("opcode must be 0 (read) or 1 (write), not " + std::to_string(op)));
    }
    out.push_back(TransferRequest{static_cast<OpCode>(op), Ptr(local), target, remote, length,
                                  transport, sync});
  }
  return out;
}

std::optional<std::string> Notify(const std::optional<py::bytes>& notify) {
  if (!notify.has_value()) return std::nullopt;
  return std::string(*notify);
}

// (address, nbytes, readonly) of a C-contiguous object exporting the buffer protocol; the
// caller keeps the object (or a memoryview of it) alive while the address is used.
py::tuple AddressOf(const py::buffer& obj, bool writable) {
  Py_buffer view;
  const int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj.ptr(), &view, flags) != 0) {
    PyErr_Clear();
    Py_buffer probe;
    if (PyObject_GetBuffer(obj.ptr(), &probe, PyBUF_FULL_RO) == 0) {
      const bool readonly = probe.readonly != 0;
      PyBuffer_Release(&probe);
      if (writable && readonly) {
        Check(InvalidArgumentError(std::string(py::str(py::type::of(obj))) +
                                   " is read-only, and the engine writes into this buffer"));
      }
    } else {
      PyErr_Clear();
    }
    Check(InvalidArgumentError(std::string(py::str(py::type::of(obj))) +
                               " is not C-contiguous: make it contiguous first"));
  }
  py::tuple out = py::make_tuple(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(view.buf)),
                                 static_cast<uint64_t>(view.len), view.readonly != 0);
  PyBuffer_Release(&view);
  return out;
}

// Deletes a PyEngine with the GIL released (the holder's deleter runs with it held).
struct ReleasingGilDelete {
  void operator()(PyEngine* engine) const {
    if (engine == nullptr) return;
    if (PyGILState_Check() == 0) {
      delete engine;
      return;
    }
    py::gil_scoped_release release;
    delete engine;
  }
};

py::dict HistogramDict(const LatencyHistogram& h) {
  py::list buckets;  // (upper bound in seconds, count in that bucket); the last bound is inf
  for (size_t i = 0; i < LatencyHistogram::kBuckets; ++i) {
    buckets.append(py::make_tuple(LatencyHistogram::UpperBoundSeconds(i), h.buckets[i]));
  }
  py::dict d;
  d["count"] = h.count;
  d["sum_seconds"] = h.sum_seconds;
  d["buckets"] = buckets;
  return d;
}

// EngineMetrics (ferry/metrics.h) as plain dicts and lists; failures by StatusCode name (only
// the non-zero ones), a transport's own counters by name.
py::dict MetricsDict(const EngineMetrics& m) {
  py::list transfers;
  for (const TransferSeries& s : m.transfers) {
    py::dict failed;
    for (size_t i = 0; i < kStatusCodeCount; ++i) {
      if (s.failed[i] != 0)
        failed[py::str(StatusCodeName(static_cast<StatusCode>(i)))] = s.failed[i];
    }
    py::dict t;
    t["transport"] = s.transport;
    t["peer"] = s.peer;
    t["bytes_written"] = s.bytes_written;
    t["bytes_read"] = s.bytes_read;
    t["slices"] = s.slices;
    t["completed"] = s.completed;
    t["failed"] = failed;
    t["retries"] = s.retries;
    t["fallbacks"] = s.fallbacks;
    t["stale_refreshes"] = s.stale_refreshes;
    t["in_flight"] = s.in_flight;
    t["latency"] = HistogramDict(s.latency);
    transfers.append(t);
  }
  py::list transports;
  for (const TransportMetrics& tm : m.transports) {
    py::dict counters;
    for (const auto& [name, value] : tm.counters) counters[py::str(name)] = value;
    py::dict t;
    t["name"] = tm.name;
    t["registrations"] = tm.registrations;
    t["registration_failures"] = tm.registration_failures;
    t["registered_bytes"] = tm.registered_bytes;
    t["unregistrations"] = tm.unregistrations;
    t["registration_seconds"] = tm.registration_seconds;
    t["counters"] = counters;
    transports.append(t);
  }
  py::dict ops;
  for (const MetadataOpMetrics& op : m.metadata.ops) {
    py::dict o;
    o["count"] = op.count;
    o["errors"] = op.errors;
    o["not_found"] = op.not_found;
    o["latency"] = HistogramDict(op.latency);
    ops[py::str(op.op)] = o;
  }
  py::dict metadata;
  metadata["store"] = m.metadata.store;
  metadata["ops"] = ops;
  py::dict notifications;
  notifications["sent"] = m.notifications.sent;
  notifications["send_failures"] = m.notifications.send_failures;
  notifications["received"] = m.notifications.received;
  notifications["refused"] = m.notifications.refused;
  py::dict d;
  d["segment"] = m.segment;
  d["incarnation"] = m.incarnation;
  d["transfers"] = transfers;
  d["transports"] = transports;
  d["metadata"] = metadata;
  d["notifications"] = notifications;
  return d;
}

}  // namespace

PYBIND11_MODULE(_ferry, m) {
  m.doc() = "ferry's compiled core; use ferry.TransferEngine or ferry.Engine";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      RaiseStatus(e.status());
    }
  });

  m.def("version", [] { return std::string(VersionString()); });
  m.def("address_of", &AddressOf, py::arg("obj"), py::arg("writable"));
  m.attr("OP_READ") = static_cast<int>(OpCode::kRead);
  m.attr("OP_WRITE") = static_cast<int>(OpCode::kWrite);

  // The engine is destroyed without the GIL: unregistering and stopping it can wait on peers
  // (in-flight transfers, the store) for seconds, and other Python threads run meanwhile.
  py::class_<PyEngine, std::unique_ptr<PyEngine, ReleasingGilDelete>>(m, "Engine")
      .def(py::init<>())
      .def("init",
           [](PyEngine& self, const py::dict& options) {
             if (self.initialized()) Check(BusyError("the engine is already initialized"));
             EngineOptions o = OptionsFromDict(options);
             Status s;
             {
               py::gil_scoped_release release;
               s = self.Init(o);
             }
             Check(s);
           })
      .def_property_readonly("name",
                             [](PyEngine& self) { return self.engine().localSegmentName(); })
      .def_property_readonly("rpc_port", [](PyEngine& self) { return self.engine().rpcPort(); })
      .def_property_readonly("completion_fd",
                             [](PyEngine& self) { return self.engine().completionFd(); })
      .def_property_readonly("batch_bound_ms",
                             [](PyEngine& self) { return self.BatchBound().count(); })
      .def_property_readonly("transports", [](PyEngine& self) { return self.options().transports; })
      .def(
          "register",
          [](PyEngine& self, uint64_t addr, uint64_t length, const std::string& location,
             bool remote_accessible) {
            py::gil_scoped_release release;
            Check(self.Register(addr, length, location, remote_accessible));
          },
          py::arg("addr"), py::arg("length"), py::arg("location") = "*",
          py::arg("remote_accessible") = true)
      .def(
          "unregister",
          [](PyEngine& self, uint64_t addr) {
            py::gil_scoped_release release;
            Check(self.Unregister(addr));
          },
          py::arg("addr"))
      .def(
          "register_batch",
          [](PyEngine& self, const std::vector<uint64_t>& addrs,
             const std::vector<uint64_t>& lengths, const std::string& location) {
            py::gil_scoped_release release;
            Check(self.RegisterBatch(addrs, lengths, location));
          },
          py::arg("addrs"), py::arg("lengths"), py::arg("location") = "*")
      .def(
          "unregister_batch",
          [](PyEngine& self, const std::vector<uint64_t>& addrs) {
            py::gil_scoped_release release;
            Check(self.UnregisterBatch(addrs));
          },
          py::arg("addrs"))
      .def(
          "register_file",
          [](PyEngine& self, const std::string& path, uint64_t length, uint64_t offset,
             const std::map<std::string, std::string>& host_paths, const std::string& location) {
            py::gil_scoped_release release;
            return Unwrap(
                self.engine().registerLocalFile(path, length, offset, host_paths, location));
          },
          py::arg("path"), py::arg("length"), py::arg("offset") = 0,
          py::arg("host_paths") = std::map<std::string, std::string>{}, py::arg("location") = "cpu")
      .def(
          "unregister_file",
          [](PyEngine& self, uint64_t addr) {
            py::gil_scoped_release release;
            Check(self.engine().unregisterLocalFile(addr));
          },
          py::arg("addr"))
      .def(
          "allocate_managed",
          [](PyEngine& self, uint64_t length, const std::string& location) {
            py::gil_scoped_release release;
            return Unwrap(self.AllocateManaged(length, location));
          },
          py::arg("length"), py::arg("location") = "cpu")
      .def(
          "free_managed",
          [](PyEngine& self, uint64_t addr, uint64_t length) {
            py::gil_scoped_release release;
            Check(self.FreeManaged(addr, length));
          },
          py::arg("addr"), py::arg("length") = 0)
      .def(
          "write_bytes",
          [](PyEngine& self, uint64_t addr, const py::buffer& data, int64_t length) {
            // The bytes in order: only a C-contiguous buffer is one run of them.
            Py_buffer view;
            if (PyObject_GetBuffer(data.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
              PyErr_Clear();
              Check(InvalidArgumentError(
                  "write_bytes_to_buffer: " + std::string(py::str(py::type::of(data))) +
                  " is not C-contiguous: make it contiguous first"));
            }
            std::unique_ptr<Py_buffer, void (*)(Py_buffer*)> held(&view, PyBuffer_Release);
            const auto given = static_cast<uint64_t>(view.len);
            if (length < 0) length = view.len;
            if (static_cast<uint64_t>(length) > given) {
              Check(InvalidArgumentError("write_bytes_to_buffer: length " + std::to_string(length) +
                                         " is past the " + std::to_string(given) + " bytes given"));
            }
            Status s;
            {
              // `data` stays exported (held) meanwhile, so it cannot be resized or freed.
              py::gil_scoped_release release;
              s = self.CopyIn(addr, view.buf, static_cast<uint64_t>(length));
            }
            Check(s);
          },
          py::arg("addr"), py::arg("data"), py::arg("length") = -1)
      .def(
          "read_bytes",
          [](PyEngine& self, uint64_t addr, uint64_t length) {
            if (length > static_cast<uint64_t>(PY_SSIZE_T_MAX)) {
              Check(InvalidArgumentError("read_bytes_from_buffer: length too large"));
            }
            PyObject* raw = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(length));
            if (raw == nullptr) throw py::error_already_set();
            py::bytes out = py::reinterpret_steal<py::bytes>(raw);
            char* dst = PyBytes_AS_STRING(raw);
            Status s;
            {
              py::gil_scoped_release release;
              s = self.CopyOut(addr, dst, length);
            }
            Check(s);
            return out;
          },
          py::arg("addr"), py::arg("length"))
      .def(
          "open",
          [](PyEngine& self, const std::string& name) {
            py::gil_scoped_release release;
            return Unwrap(self.engine().openSegment(name));
          },
          py::arg("name"))
      .def(
          "close",
          [](PyEngine& self, SegmentId id) {
            py::gil_scoped_release release;
            Check(self.engine().closeSegment(id));
          },
          py::arg("segment"))
      .def(
          "sync",
          [](PyEngine& self, const std::string& name) {
            py::gil_scoped_release release;
            Check(self.engine().syncSegmentCache(name));
          },
          py::arg("name") = "")
      .def(
          "probe",
          [](PyEngine& self, SegmentId id) {
            py::gil_scoped_release release;
            return Unwrap(self.engine().probeSegment(id));
          },
          py::arg("segment"))
      .def(
          "segment_buffers",
          [](PyEngine& self, SegmentId id) {
            std::vector<SegmentBuffer> buffers;
            {
              py::gil_scoped_release release;
              buffers = Unwrap(self.engine().getSegmentBuffers(id));
            }
            py::list out;
            for (const SegmentBuffer& b : buffers) {
              out.append(py::make_tuple(b.addr, b.length, b.location, b.generation, b.transports));
            }
            return out;
          },
          py::arg("segment"))
      .def(
          "submit",
          [](PyEngine& self, const std::vector<AnyRequestTuple>& tuples,
             const std::optional<py::bytes>& notify) {
            std::vector<TransferRequest> requests = Requests(tuples);
            std::optional<std::string> message = Notify(notify);
            py::gil_scoped_release release;
            return Unwrap(self.Submit(requests, message));
          },
          py::arg("requests"), py::arg("notify") = py::none())
      .def(
          "transfer",
          [](PyEngine& self, const std::vector<AnyRequestTuple>& tuples,
             const std::optional<py::bytes>& notify) {
            std::vector<TransferRequest> requests = Requests(tuples);
            std::optional<std::string> message = Notify(notify);
            BatchStatus summary;
            {
              py::gil_scoped_release release;
              summary = Unwrap(self.TransferSync(requests, message));
            }
            return BatchDict(summary);
          },
          py::arg("requests"), py::arg("notify") = py::none())
      .def(
          "wait",
          [](PyEngine& self, BatchId batch, int64_t timeout_ms) {
            BatchStatus summary;
            {
              py::gil_scoped_release release;
              summary = Unwrap(self.engine().waitBatch(
                  batch,
                  timeout_ms < 0 ? self.BatchBound() : std::chrono::milliseconds(timeout_ms)));
            }
            return BatchDict(summary);
          },
          py::arg("batch"), py::arg("timeout_ms") = -1)
      .def(
          "batch_status",
          [](PyEngine& self, BatchId batch) {
            return BatchDict(Unwrap(self.engine().getBatchTransferStatus(batch)));
          },
          py::arg("batch"))
      .def(
          "task_status",
          [](PyEngine& self, BatchId batch, size_t task) {
            return TaskDict(Unwrap(self.engine().getTransferStatus(batch, task)));
          },
          py::arg("batch"), py::arg("task"))
      .def(
          "cancel",
          [](PyEngine& self, BatchId batch) {
            py::gil_scoped_release release;
            Check(self.engine().cancelBatch(batch));
          },
          py::arg("batch"))
      .def(
          "free",
          [](PyEngine& self, BatchId batch) {
            py::gil_scoped_release release;
            Check(self.engine().freeBatchID(batch));
          },
          py::arg("batch"))
      .def("metrics",
           [](PyEngine& self) {
             EngineMetrics snapshot;
             {
               py::gil_scoped_release release;
               snapshot = self.engine().getMetrics();
             }
             return MetricsDict(snapshot);
           })
      .def_property_readonly("metrics_port",
                             [](PyEngine& self) { return self.engine().metricsPort(); })
      .def("notifies",
           [](PyEngine& self) {
             std::vector<NotifyMessage> got = self.engine().getNotifies();
             py::list out;
             for (const NotifyMessage& n : got)
               out.append(py::make_tuple(n.name, py::bytes(n.payload)));
             return out;
           })
      .def(
          "send_notify",
          [](PyEngine& self, SegmentId target, const py::bytes& payload) {
            NotifyMessage message{"", std::string(payload)};
            py::gil_scoped_release release;
            Check(self.engine().sendNotify(target, message));
          },
          py::arg("segment"), py::arg("payload"));
}

}  // namespace ferry::python
