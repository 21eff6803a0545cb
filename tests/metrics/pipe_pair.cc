#include "pipe_pair.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <stdexcept>

#include <unistd.h>
#include <atomic>

#include <tensorpipe/channel/basic/factory.h>
#include <tensorpipe/channel/cma/factory.h>
#if RPCJOB_HAS_XTH_CHANNEL
#include <tensorpipe/channel/xth/factory.h>
#endif
#include <tensorpipe/transport/shm/factory.h>
#include <tensorpipe/transport/uv/factory.h>

#include "rpcjob/instrument/instrument.h"

namespace rpcjob {
namespace testing {
namespace {

std::shared_ptr<tensorpipe::channel::Context> createChannel(const std::string& name) {
  if (name == "basic") {
    return tensorpipe::channel::basic::create();
  }
  if (name == "cma") {
    return tensorpipe::channel::cma::create();
  }
#if RPCJOB_HAS_XTH_CHANNEL
  if (name == "xth") {
    return tensorpipe::channel::xth::create();
  }
#endif
  throw std::invalid_argument("unknown channel " + name);
}

std::shared_ptr<tensorpipe::transport::Context> createTransport(const std::string& name) {
  if (name == "uv") {
    return tensorpipe::transport::uv::create();
  }
  if (name == "shm") {
    return tensorpipe::transport::shm::create();
  }
  throw std::invalid_argument("unknown transport " + name);
}

}  // namespace

struct Endpoint::State {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<std::shared_ptr<tensorpipe::Pipe>> pipes;
  std::string error;
};

Endpoint::Endpoint(EndpointOptions options)
    : state_(std::make_shared<State>()),
      context_(
          std::make_shared<tensorpipe::Context>(tensorpipe::ContextOptions().name(options.name))),
      transport_(options.transport) {
  auto transport = createTransport(options.transport);
  if (options.metrics != nullptr && options.instrumentTransport) {
    transport = instrument::instrumentTransport(options.transport, transport, *options.metrics);
  }
  context_->registerTransport(0, options.transport, transport);
  int64_t priority = static_cast<int64_t>(options.channels.size());
  for (const auto& name : options.channels) {
    auto channel = createChannel(name);
    if (options.metrics != nullptr) {
      channel = instrument::instrumentChannel(name, channel, *options.metrics);
    }
    context_->registerChannel(priority--, name, channel);
  }
}

Endpoint::~Endpoint() {
  context_->close();
  context_->join();
}

std::string Endpoint::listen() {
  std::string url = "uv://127.0.0.1";
  if (transport_ == "shm") {
    static std::atomic<int> counter{0};
    url = "shm://rpcjob-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  }
  listener_ = context_->listen({url});
  armAccept();
  return listener_->url(transport_);
}

void Endpoint::armAccept() {
  std::weak_ptr<State> weak = state_;
  auto listener = listener_;
  listener_->accept(
      [this, weak](const tensorpipe::Error& error, std::shared_ptr<tensorpipe::Pipe> pipe) {
        auto state = weak.lock();
        if (!state) {
          return;
        }
        {
          std::lock_guard<std::mutex> lock(state->mutex);
          if (error) {
            state->error = error.what();
          } else {
            state->pipes.push_back(std::move(pipe));
          }
        }
        state->cv.notify_all();
        if (!error) {
          armAccept();
        }
      });
}

std::shared_ptr<tensorpipe::Pipe> Endpoint::accepted() {
  std::unique_lock<std::mutex> lock(state_->mutex);
  if (!state_->cv.wait_for(lock, std::chrono::seconds(30),
                           [&] { return !state_->pipes.empty() || !state_->error.empty(); })) {
    throw std::runtime_error("no pipe accepted within 30 s");
  }
  if (state_->pipes.empty()) {
    throw std::runtime_error("accept: " + state_->error);
  }
  auto pipe = state_->pipes.front();
  state_->pipes.pop_front();
  return pipe;
}

std::shared_ptr<tensorpipe::Pipe> Endpoint::connect(const std::string& url,
                                                    const std::string& remoteName) {
  return context_->connect(url, tensorpipe::PipeOptions().remoteName(remoteName));
}

void sendTensors(tensorpipe::Pipe& pipe, const std::vector<Bytes>& tensors) {
  tensorpipe::Message message;
  for (const auto& tensor : tensors) {
    tensorpipe::Message::Tensor t;
    t.buffer = tensorpipe::CpuBuffer{const_cast<std::uint8_t*>(tensor.data())};
    t.length = tensor.size();
    t.targetDevice = tensorpipe::Device{tensorpipe::kCpuDeviceType, 0};
    message.tensors.push_back(std::move(t));
  }
  std::promise<void> done;
  pipe.write(std::move(message), [&done](const tensorpipe::Error& error) {
    if (error) {
      done.set_exception(std::make_exception_ptr(std::runtime_error(error.what())));
    } else {
      done.set_value();
    }
  });
  done.get_future().get();
}

std::vector<Bytes> receiveTensors(tensorpipe::Pipe& pipe) {
  std::promise<tensorpipe::Descriptor> described;
  pipe.readDescriptor(
      [&described](const tensorpipe::Error& error, tensorpipe::Descriptor descriptor) {
        if (error) {
          described.set_exception(std::make_exception_ptr(std::runtime_error(error.what())));
        } else {
          described.set_value(std::move(descriptor));
        }
      });
  tensorpipe::Descriptor descriptor = described.get_future().get();
  std::vector<Bytes> tensors;
  tensors.reserve(descriptor.tensors.size());
  tensorpipe::Allocation allocation;
  for (const auto& tensor : descriptor.tensors) {
    tensors.emplace_back(tensor.length);
    tensorpipe::Allocation::Tensor t;
    t.buffer = tensorpipe::CpuBuffer{tensors.back().data()};
    allocation.tensors.push_back(std::move(t));
  }
  std::promise<void> read;
  pipe.read(std::move(allocation), [&read](const tensorpipe::Error& error) {
    if (error) {
      read.set_exception(std::make_exception_ptr(std::runtime_error(error.what())));
    } else {
      read.set_value();
    }
  });
  read.get_future().get();
  return tensors;
}

Bytes pattern(std::size_t size, std::uint8_t seed) {
  Bytes bytes(size);
  for (std::size_t i = 0; i < size; ++i) {
    bytes[i] = static_cast<std::uint8_t>(seed + i * 31);
  }
  return bytes;
}

namespace {

// Echo server: read a message into its buffer, write it back, repeat.
struct Echo : std::enable_shared_from_this<Echo> {
  tensorpipe::Pipe* pipe;
  Bytes buffer;
  int remaining;
  void next() {
    if (remaining-- == 0) {
      return;
    }
    auto self = shared_from_this();
    // Errors end the echo: the caller sees them as a missing reply.
    pipe->readDescriptor([self](const tensorpipe::Error& error, tensorpipe::Descriptor) {
      if (error) {
        return;
      }
      tensorpipe::Allocation allocation;
      allocation.tensors.push_back({tensorpipe::CpuBuffer{self->buffer.data()}});
      self->pipe->read(std::move(allocation), [self](const tensorpipe::Error& error) {
        if (error) {
          return;
        }
        tensorpipe::Message message;
        tensorpipe::Message::Tensor t;
        t.buffer = tensorpipe::CpuBuffer{self->buffer.data()};
        t.length = self->buffer.size();
        t.targetDevice = tensorpipe::Device{tensorpipe::kCpuDeviceType, 0};
        message.tensors.push_back(std::move(t));
        self->pipe->write(std::move(message), [](const tensorpipe::Error&) {});
        self->next();
      });
    });
  }
};

struct Caller : std::enable_shared_from_this<Caller> {
  tensorpipe::Pipe* pipe;
  Bytes out;
  Bytes in;
  int remaining;
  std::promise<void> done;
  void fail(const tensorpipe::Error& error) {
    done.set_exception(std::make_exception_ptr(std::runtime_error(error.what())));
  }
  void next() {
    if (remaining-- == 0) {
      done.set_value();
      return;
    }
    auto self = shared_from_this();
    tensorpipe::Message message;
    tensorpipe::Message::Tensor t;
    t.buffer = tensorpipe::CpuBuffer{out.data()};
    t.length = out.size();
    t.targetDevice = tensorpipe::Device{tensorpipe::kCpuDeviceType, 0};
    message.tensors.push_back(std::move(t));
    pipe->write(std::move(message), [](const tensorpipe::Error&) {});
    pipe->readDescriptor([self](const tensorpipe::Error& error, tensorpipe::Descriptor) {
      if (error) {
        self->fail(error);
        return;
      }
      tensorpipe::Allocation allocation;
      allocation.tensors.push_back({tensorpipe::CpuBuffer{self->in.data()}});
      self->pipe->read(std::move(allocation), [self](const tensorpipe::Error& error) {
        if (error) {
          self->fail(error);
          return;
        }
        self->next();
      });
    });
  }
};

}  // namespace

double pingPong(tensorpipe::Pipe& client, tensorpipe::Pipe& server, std::size_t size,
                int iterations) {
  auto echo = std::make_shared<Echo>();
  echo->pipe = &server;
  echo->buffer.resize(size);
  echo->remaining = iterations;
  echo->next();
  auto caller = std::make_shared<Caller>();
  caller->pipe = &client;
  caller->out = pattern(size, 1);
  caller->in.resize(size);
  caller->remaining = iterations;
  auto finished = caller->done.get_future();
  const auto start = std::chrono::steady_clock::now();
  caller->next();
  finished.get();
  const auto elapsed = std::chrono::steady_clock::now() - start;
  return std::chrono::duration<double, std::micro>(elapsed).count() / iterations;
}

}  // namespace testing
}  // namespace rpcjob
