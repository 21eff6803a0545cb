#include "nop_guard.h"

// PyTorch's libtorch lacks these interface headers; the CUDA build finds Debian's
// libtensorpipe-dev copies through RPCJOB_TENSORPIPE_EXTRA_INCLUDE_DIR.
#include <tensorpipe/common/error.h>
#include <tensorpipe/common/nop.h>
#include <tensorpipe/transport/connection.h>
#include <tensorpipe/transport/context.h>
#include <tensorpipe/transport/listener.h>

#include <cstdint>
#include <string>
#include <utility>

namespace rpcjob::runtime {
namespace {

using tensorpipe::Error;

class BadControlMessage final : public tensorpipe::BaseError {
 public:
  explicit BadControlMessage(std::string why) : why_(std::move(why)) {}
  std::string what() const override {
    return "malformed TensorPipe control message (" + why_ + "): connection closed";
  }

 private:
  std::string why_;
};

class GuardedConnection final : public tensorpipe::transport::Connection {
 public:
  explicit GuardedConnection(std::shared_ptr<tensorpipe::transport::Connection> inner)
      : inner_(std::move(inner)) {}

  void read(read_callback_fn fn) override { inner_->read(std::move(fn)); }
  void read(void* ptr, size_t length, read_callback_fn fn) override {
    inner_->read(ptr, length, std::move(fn));
  }
  void write(const void* ptr, size_t length, write_callback_fn fn) override {
    inner_->write(ptr, length, std::move(fn));
  }

  // The frame a nop write produced, read raw, then parsed where a failure is
  // an error rather than an assertion.
  void read(tensorpipe::AbstractNopHolder& object, read_nop_callback_fn fn) override {
    std::weak_ptr<tensorpipe::transport::Connection> weak = inner_;
    inner_->read([weak, &object, fn{std::move(fn)}](const Error& error, const void* ptr,
                                                    size_t length) {
      if (error) {
        fn(error);
        return;
      }
      tensorpipe::NopReader reader(static_cast<const uint8_t*>(ptr), length);
      nop::Status<void> status = object.read(reader);
      if (!status.has_error()) {
        fn(Error::kSuccess);
        return;
      }
      // Whatever follows on this connection cannot be trusted either.
      if (auto inner = weak.lock()) inner->close();
      fn(Error(std::make_shared<BadControlMessage>(status.GetErrorMessage()), __FILE__, __LINE__));
    });
  }
  void write(const tensorpipe::AbstractNopHolder& object, write_callback_fn fn) override {
    inner_->write(object, std::move(fn));
  }

  void setId(std::string id) override { inner_->setId(std::move(id)); }
  void close() override { inner_->close(); }

 private:
  const std::shared_ptr<tensorpipe::transport::Connection> inner_;
};

std::shared_ptr<tensorpipe::transport::Connection> guard(
    std::shared_ptr<tensorpipe::transport::Connection> inner) {
  if (!inner) return inner;
  return std::make_shared<GuardedConnection>(std::move(inner));
}

class GuardedListener final : public tensorpipe::transport::Listener {
 public:
  explicit GuardedListener(std::shared_ptr<tensorpipe::transport::Listener> inner)
      : inner_(std::move(inner)) {}

  void accept(accept_callback_fn fn) override {
    inner_->accept(
        [fn{std::move(fn)}](const Error& error,
                            std::shared_ptr<tensorpipe::transport::Connection> connection) {
          fn(error, guard(std::move(connection)));
        });
  }
  std::string addr() const override { return inner_->addr(); }
  void setId(std::string id) override { inner_->setId(std::move(id)); }
  void close() override { inner_->close(); }

 private:
  const std::shared_ptr<tensorpipe::transport::Listener> inner_;
};

class GuardedContext final : public tensorpipe::transport::Context {
 public:
  explicit GuardedContext(std::shared_ptr<tensorpipe::transport::Context> inner)
      : inner_(std::move(inner)) {}

  std::shared_ptr<tensorpipe::transport::Connection> connect(std::string addr) override {
    return guard(inner_->connect(std::move(addr)));
  }
  std::shared_ptr<tensorpipe::transport::Listener> listen(std::string addr) override {
    return guardNopReads(inner_->listen(std::move(addr)));
  }
  bool isViable() const override { return inner_->isViable(); }
  const std::string& domainDescriptor() const override { return inner_->domainDescriptor(); }
  bool canCommunicateWithRemote(const std::string& remoteDomainDescriptor) const override {
    return inner_->canCommunicateWithRemote(remoteDomainDescriptor);
  }
  void setId(std::string id) override { inner_->setId(std::move(id)); }
  void close() override { inner_->close(); }
  void join() override { inner_->join(); }

 private:
  const std::shared_ptr<tensorpipe::transport::Context> inner_;
};

}  // namespace

std::shared_ptr<tensorpipe::transport::Context> guardNopReads(
    std::shared_ptr<tensorpipe::transport::Context> inner) {
  if (!inner) return inner;
  return std::make_shared<GuardedContext>(std::move(inner));
}

std::shared_ptr<tensorpipe::transport::Listener> guardNopReads(
    std::shared_ptr<tensorpipe::transport::Listener> inner) {
  if (!inner) return inner;
  return std::make_shared<GuardedListener>(std::move(inner));
}

}  // namespace rpcjob::runtime
