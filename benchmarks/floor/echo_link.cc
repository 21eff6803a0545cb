#include "echo_link.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <thread>
#include <utility>

namespace rpcjob::tpfloor {
namespace {

std::shared_ptr<tensorpipe::channel::Context> createChannel(const std::string& name) {
  if (name == "basic") return tensorpipe::channel::basic::create();
#if TENSORPIPE_HAS_CMA_CHANNEL
  if (name == "cma") return tensorpipe::channel::cma::create();
#endif
  return nullptr;
}

// Receive buffers of the server, reused: what the floor measures is the
// transfer, not the allocator (rpcjob keeps large receive buffers cached too).
class BufferPool {
 public:
  std::unique_ptr<char[]> take(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->first == bytes) {
          std::unique_ptr<char[]> buffer = std::move(it->second);
          free_.erase(it);
          return buffer;
        }
      }
    }
    return std::unique_ptr<char[]>(new char[bytes > 0 ? bytes : 1]);
  }
  void give(size_t bytes, std::unique_ptr<char[]> buffer) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.emplace_back(bytes, std::move(buffer));
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<size_t, std::unique_ptr<char[]>>> free_;
};

struct ServerState {
  BufferPool pool;
  Corruption corruption;
  long echoed = 0;  // on TensorPipe's thread only
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;

  void finish() {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
    }
    cv.notify_all();
  }
};

// One message being echoed: its descriptor and the buffers it was read into,
// which go back to the pool once the echo is written.
struct Echo {
  std::shared_ptr<ServerState> state;
  tensorpipe::Descriptor descriptor;
  std::vector<std::unique_ptr<char[]>> payloads;
  std::vector<std::unique_ptr<char[]>> tensors;
  ~Echo() {
    for (size_t i = 0; i < payloads.size(); ++i) {
      state->pool.give(descriptor.payloads[i].length, std::move(payloads[i]));
    }
    for (size_t i = 0; i < tensors.size(); ++i) {
      state->pool.give(descriptor.tensors[i].length, std::move(tensors[i]));
    }
  }
};

void spoil(Echo& echo, tensorpipe::Message& message, ServerState& state) {
  const Corruption& c = state.corruption;
  if (c.tensor && !message.tensors.empty() && message.tensors[0].length > 0) {
    echo.tensors[0][message.tensors[0].length / 2] ^= 1;
    state.corruption = {};
  } else if (c.message == state.echoed && !message.metadata.empty()) {
    message.metadata[message.metadata.size() / 2] ^= 1;
  }
}

// Reads the next message and writes it back from the read callback, then
// reads the next: the whole loop runs on TensorPipe's threads.
void echoNext(const std::shared_ptr<tensorpipe::Pipe>& pipe,
              const std::shared_ptr<ServerState>& state) {
  pipe->readDescriptor(
      [pipe, state](const tensorpipe::Error& error, tensorpipe::Descriptor descriptor) {
        if (error) {  // the client closed the pipe: the end of the run
          state->finish();
          return;
        }
        auto echo = std::make_shared<Echo>();
        echo->state = state;
        tensorpipe::Allocation allocation;
        for (const auto& p : descriptor.payloads) {
          echo->payloads.push_back(state->pool.take(p.length));
          allocation.payloads.push_back({echo->payloads.back().get()});
        }
        for (const auto& t : descriptor.tensors) {
          echo->tensors.push_back(state->pool.take(t.length));
          tensorpipe::Allocation::Tensor a;
          a.buffer = tensorpipe::CpuBuffer{echo->tensors.back().get()};
          allocation.tensors.push_back(std::move(a));
        }
        echo->descriptor = std::move(descriptor);
        pipe->read(std::move(allocation), [pipe, state, echo](const tensorpipe::Error& error) {
          if (error) {
            state->finish();
            return;
          }
          ++state->echoed;
          tensorpipe::Message message;
          message.metadata = std::move(echo->descriptor.metadata);
          for (size_t i = 0; i < echo->payloads.size(); ++i) {
            tensorpipe::Message::Payload p;
            p.data = echo->payloads[i].get();
            p.length = echo->descriptor.payloads[i].length;
            p.metadata = echo->descriptor.payloads[i].metadata;
            message.payloads.push_back(std::move(p));
          }
          for (size_t i = 0; i < echo->tensors.size(); ++i) {
            tensorpipe::Message::Tensor t;
            t.buffer = tensorpipe::CpuBuffer{echo->tensors[i].get()};
            t.length = echo->descriptor.tensors[i].length;
            t.targetDevice = tensorpipe::Device{tensorpipe::kCpuDeviceType, 0};
            t.metadata = echo->descriptor.tensors[i].metadata;
            message.tensors.push_back(std::move(t));
          }
          if (state->corruption.tensor || state->corruption.message > 0) {
            spoil(*echo, message, *state);
          }
          pipe->write(std::move(message), [echo](const tensorpipe::Error&) {
            // A failed echo fails the client's wait; nothing to do here.
          });
          echoNext(pipe, state);
        });
      });
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

// One line from `fd` within `seconds` (without the newline); empty on EOF or
// timeout.
std::string readLine(int fd, int seconds) {
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char c;
    if (::read(fd, &c, 1) != 1) break;
    if (c == '\n') return line;
    line += c;
  }
  return "";
}

}  // namespace

std::shared_ptr<tensorpipe::Context> makeContext(const std::string& name,
                                                 const std::vector<std::string>& channels,
                                                 Registered& registered) {
  auto context = std::make_shared<tensorpipe::Context>(tensorpipe::ContextOptions().name(name));
  registered = {};
  registered.transport = "uv";
#if TENSORPIPE_HAS_SHM_TRANSPORT
  auto shm = tensorpipe::transport::shm::create();
  if (shm->isViable()) {
    context->registerTransport(2, "shm", shm);
    registered.transport = "shm";
  }
#endif
  context->registerTransport(1, "uv", tensorpipe::transport::uv::create());
  auto priority = static_cast<int64_t>(channels.size());
  for (const auto& channel : channels) {
    auto created = createChannel(channel);
    // cma needs ptrace rights between the processes (CAP_SYS_PTRACE or a
    // permissive Yama scope): the runtime leaves it out where it is not viable.
    if (created && created->isViable()) {
      context->registerChannel(priority, channel, created);
      registered.channels.push_back(channel);
    }
    --priority;
  }
  return context;
}

int serve(const std::vector<std::string>& channels, Corruption corruption) {
  Registered registered;
  auto context = makeContext("floor-server", channels, registered);
  if (registered.channels.empty()) {
    std::cerr << "rpcjob-tp-floor: none of the channels " << joined(channels) << " is viable\n";
    return 1;
  }
  std::vector<std::string> urls;
  if (registered.transport == "shm") urls.push_back("shm://");
  urls.push_back("uv://127.0.0.1");
  auto state = std::make_shared<ServerState>();
  state->corruption = corruption;
  std::shared_ptr<tensorpipe::Listener> listener = context->listen(urls);
  listener->accept([state](const tensorpipe::Error& error, std::shared_ptr<tensorpipe::Pipe> pipe) {
    if (error) {
      state->finish();
      return;
    }
    echoNext(pipe, state);
  });
  std::cout << listener->url("uv") << std::endl;
  {
    std::unique_lock<std::mutex> lock(state->mu);
    state->cv.wait(lock, [&] { return state->done; });
  }
  context->close();
  context->join();
  return 0;
}

bool Signal::wait(const std::function<bool()>& done, double seconds) {
  for (int i = 0; i < 64; ++i) {
    if (done()) return true;
    std::this_thread::yield();
  }
  std::unique_lock<std::mutex> lock(mu_);
  // All sequentially consistent (here, in notify() and the state done()
  // reads): either notify() sees this sleeper, or done() below sees the
  // change notify() was called for.
  sleepers_.fetch_add(1);
  const bool ok = cv_.wait_for(lock, std::chrono::duration<double>(seconds), done);
  sleepers_.fetch_sub(1);
  return ok;
}

void Signal::notify() {
  if (sleepers_.load() == 0) return;
  { std::lock_guard<std::mutex> lock(mu_); }
  cv_.notify_all();
}

EchoLink::EchoLink(const std::string& self, const std::vector<std::string>& channels,
                   const std::vector<std::string>& serverArgs) {
  context_ = makeContext("floor-client", channels, registered_);
  std::vector<std::string> args = {self, "--serve", joined(channels)};
  args.insert(args.end(), serverArgs.begin(), serverArgs.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int out[2];
  if (::pipe(out) != 0) throw std::runtime_error("pipe() failed");
  server_ = ::fork();
  if (server_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the client
    ::dup2(out[1], STDOUT_FILENO);
    ::close(out[0]);
    ::close(out[1]);
    ::execv(argv[0], argv.data());
    _exit(127);
  }
  ::close(out[1]);
  const std::string url = server_ > 0 ? readLine(out[0], 30) : "";
  ::close(out[0]);
  if (url.empty()) {
    closed_ = true;
    if (server_ > 0) {
      ::kill(server_, SIGKILL);
      ::waitpid(server_, nullptr, 0);
    }
    context_->close();
    context_->join();
    throw std::runtime_error("the server process (" + self + " --serve) did not start");
  }
  pipe_ = context_->connect(url, tensorpipe::PipeOptions().remoteName("floor-server"));
  readNext();
}

EchoLink::~EchoLink() {
  close();
}

void EchoLink::readNext() {
  pipe_->readDescriptor([this](const tensorpipe::Error& error, tensorpipe::Descriptor descriptor) {
    if (error) {
      fail(std::string("reading an echo: ") + error.what());
      return;
    }
    tensorpipe::Allocation allocation;
    if (!descriptor.payloads.empty() || descriptor.tensors.size() > 1) {
      fail("an echo with payloads or several tensors: not what was sent");
      return;
    }
    if (descriptor.tensors.size() == 1) {
      char* into = nullptr;
      size_t expected = 0;
      {
        std::lock_guard<std::mutex> lock(handlerMu_);
        into = receive_;
        expected = receiveLength_;
      }
      if (into == nullptr || descriptor.tensors[0].length != expected) {
        fail("an echoed tensor of " + std::to_string(descriptor.tensors[0].length) +
             " bytes; expected " + std::to_string(expected));
        return;
      }
      tensorpipe::Allocation::Tensor t;
      t.buffer = tensorpipe::CpuBuffer{into};
      allocation.tensors.push_back(std::move(t));
    }
    pipe_->read(std::move(allocation), [this, metadata = std::move(descriptor.metadata)](
                                           const tensorpipe::Error& error) mutable {
      if (error) {
        fail(std::string("reading an echo: ") + error.what());
        return;
      }
      {
        std::lock_guard<std::mutex> lock(handlerMu_);
        handler_(std::move(metadata));
      }
      readNext();
    });
  });
}

void EchoLink::onResponse(Handler handler) {
  std::lock_guard<std::mutex> lock(handlerMu_);
  handler_ = std::move(handler);
}

void EchoLink::receiveInto(char* buffer, size_t length) {
  std::lock_guard<std::mutex> lock(handlerMu_);
  receive_ = buffer;
  receiveLength_ = length;
}

void EchoLink::write(std::string metadata, const char* tensor, size_t length) {
  tensorpipe::Message message;
  message.metadata = std::move(metadata);
  if (tensor != nullptr) {
    tensorpipe::Message::Tensor t;
    t.buffer = tensorpipe::CpuBuffer{const_cast<char*>(tensor)};
    t.length = length;
    t.targetDevice = tensorpipe::Device{tensorpipe::kCpuDeviceType, 0};
    message.tensors.push_back(std::move(t));
  }
  pipe_->write(std::move(message), [this](const tensorpipe::Error& error) {
    if (error) fail(std::string("writing: ") + error.what());
  });
}

std::string EchoLink::error() {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void EchoLink::fail(const std::string& why) {
  if (closing_.load()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.empty()) error_ = why;
  }
  failed_.store(true);
  signal_.notify();
}

std::string EchoLink::close() {
  if (closed_) return closeError_;
  closed_ = true;
  closing_.store(true);
  pipe_->close();
  context_->close();
  context_->join();
  // The server ends when it sees the pipe close.
  int status = 0;
  pid_t done = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while ((done = ::waitpid(server_, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (done == 0) {
    ::kill(server_, SIGKILL);
    ::waitpid(server_, &status, 0);
    closeError_ = "the server did not exit within 30 s of the pipe's close";
  } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    closeError_ = "the server failed (status " + std::to_string(status) + ")";
  }
  return closeError_;
}

}  // namespace rpcjob::tpfloor
