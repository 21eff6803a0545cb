#pragma once
// TensorPipe's Channel and Connection interfaces, for TensorPipe installs that
// lack their headers (PyTorch's libtorch ships tensorpipe/channel/context.h but
// not channel/channel.h or transport/connection.h). Declarations identical to
// TensorPipe's (BSD licence, Meta Platforms), so the vtables match the library's;
// AbstractNopHolder is only named (it is passed by reference, never used here).
// Used only where __has_include finds no real header.

#include <tensorpipe/channel/context.h>
#include <tensorpipe/common/buffer.h>
#include <tensorpipe/common/error.h>
#include <tensorpipe/transport/context.h>

#include <functional>
#include <string>

namespace tensorpipe {

class AbstractNopHolder;

namespace channel {

using TSendCallback = std::function<void(const Error&)>;
using TRecvCallback = std::function<void(const Error&)>;

class Channel {
 public:
  virtual void send(Buffer buffer, size_t length, TSendCallback callback) = 0;
  virtual void recv(Buffer buffer, size_t length, TRecvCallback callback) = 0;
  virtual void setId(std::string id) = 0;
  virtual void close() = 0;
  virtual ~Channel() = default;
};

}  // namespace channel

namespace transport {

class Connection {
 public:
  using read_callback_fn = std::function<void(const Error& error, const void* ptr, size_t length)>;
  virtual void read(read_callback_fn fn) = 0;
  virtual void read(void* ptr, size_t length, read_callback_fn fn) = 0;
  using write_callback_fn = std::function<void(const Error& error)>;
  virtual void write(const void* ptr, size_t length, write_callback_fn fn) = 0;
  using read_nop_callback_fn = std::function<void(const Error& error)>;
  virtual void read(AbstractNopHolder& object, read_nop_callback_fn fn) = 0;
  virtual void write(const AbstractNopHolder& object, write_callback_fn fn) = 0;
  virtual void setId(std::string id) = 0;
  virtual void close() = 0;
  virtual ~Connection() = default;
};

}  // namespace transport
}  // namespace tensorpipe
