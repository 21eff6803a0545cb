#pragma once

// TensorPipe channel and transport contexts whose operations complete at once,
// on the caller's thread, failing once told to: the decorators' unit tests and
// instrument_bench (the decorators' own cost, free of system noise) use them.

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <tensorpipe/channel/channel.h>
#include <tensorpipe/channel/context.h>
#include <tensorpipe/channel/error.h>
#include <tensorpipe/common/nop.h>
#include <tensorpipe/transport/connection.h>
#include <tensorpipe/transport/context.h>
#include <tensorpipe/transport/listener.h>

namespace rpcjob {
namespace testing {

// Sends fail with ChannelClosedError while `fail` is set; receives succeed.
class ImmediateChannel : public tensorpipe::channel::Channel {
 public:
  bool fail = false;
  void send(tensorpipe::Buffer, size_t, tensorpipe::channel::TSendCallback cb) override {
    cb(fail ? tensorpipe::Error(std::make_shared<tensorpipe::channel::ChannelClosedError>(), "", 0)
            : tensorpipe::Error::kSuccess);
  }
  void recv(tensorpipe::Buffer, size_t, tensorpipe::channel::TRecvCallback cb) override {
    cb(tensorpipe::Error::kSuccess);
  }
  void setId(std::string) override {}
  void close() override {}
};

// Every createChannel() returns the same `channel`.
class ImmediateContext : public tensorpipe::channel::Context {
 public:
  std::shared_ptr<ImmediateChannel> channel = std::make_shared<ImmediateChannel>();
  bool isViable() const override { return true; }
  size_t numConnectionsNeeded() const override { return 0; }
  const std::unordered_map<tensorpipe::Device, std::string>& deviceDescriptors() const override {
    return descriptors_;
  }
  bool canCommunicateWithRemote(const std::string&, const std::string&) const override {
    return true;
  }
  std::shared_ptr<tensorpipe::channel::Channel> createChannel(
      std::vector<std::shared_ptr<tensorpipe::transport::Connection>>,
      tensorpipe::channel::Endpoint) override {
    return channel;
  }
  void setId(std::string) override {}
  void close() override {}
  void join() override {}

 private:
  std::unordered_map<tensorpipe::Device, std::string> descriptors_;
};

// Every operation fails with EOFError (handing over 0 bytes) while `fail` is
// set; read(fn) hands over kReadBytes bytes otherwise.
class ImmediateConnection : public tensorpipe::transport::Connection {
 public:
  static constexpr size_t kReadBytes = 5;
  bool fail = false;
  void read(read_callback_fn fn) override { fn(result(), data_, fail ? 0 : kReadBytes); }
  void read(void* ptr, size_t length, read_callback_fn fn) override {
    fn(result(), ptr, fail ? 0 : length);
  }
  void write(const void*, size_t, write_callback_fn fn) override { fn(result()); }
  void read(tensorpipe::AbstractNopHolder&, read_nop_callback_fn fn) override { fn(result()); }
  void write(const tensorpipe::AbstractNopHolder&, write_callback_fn fn) override { fn(result()); }
  void setId(std::string) override {}
  void close() override {}

 private:
  tensorpipe::Error result() const {
    return fail ? tensorpipe::Error(std::make_shared<tensorpipe::EOFError>(), __FILE__, __LINE__)
                : tensorpipe::Error::kSuccess;
  }
  char data_[kReadBytes] = {};
};

// Every connect() returns the same `connection`; no listener.
class ImmediateTransport : public tensorpipe::transport::Context {
 public:
  std::shared_ptr<ImmediateConnection> connection = std::make_shared<ImmediateConnection>();
  std::shared_ptr<tensorpipe::transport::Connection> connect(std::string) override {
    return connection;
  }
  std::shared_ptr<tensorpipe::transport::Listener> listen(std::string) override { return nullptr; }
  bool isViable() const override { return true; }
  const std::string& domainDescriptor() const override { return domain_; }
  bool canCommunicateWithRemote(const std::string&) const override { return true; }
  void setId(std::string) override {}
  void close() override {}
  void join() override {}

 private:
  std::string domain_ = "immediate";
};

}  // namespace testing
}  // namespace rpcjob
