// rpcjob-crd-apiserver: the Kubernetes v1.36 CustomResourceDefinition API server
// (k8s.io/apiextensions-apiserver) as a standalone test server for the RpcJob API:
// CRDs, custom objects, their schema, defaults, CEL rules and status subresource.
//
// Built by tests/kube/modern-apiserver.sh from Debian sid's golang-k8s-* packages
// (GOPATH mode, offline). Upstream's own main (options.NewServerCommand) is made to
// run behind a full kube-apiserver and is not usable alone; this one differs where
// that matters (see ../shared/MODERN-APISERVER.md):
//   - discovery is on (apiextensions turns it off in Complete(): its delegate, the
//     kube-apiserver, normally serves /apis), so kubectl finds the group;
//   - an OpenAPI v2 config beside v3, as kubectl's older paths still read /openapi/v2;
//   - the remote (delegated) authentication and authorization kubeconfigs are
//     optional: client certificates of the --client-ca-file authenticate, group
//     system:masters is always allowed, anyone else gets 403;
//   - no core-API client at all: no admission plugins (they all need one; CEL
//     validation is not admission and still runs), no priority and fairness, and the
//     default service resolver for conversion webhooks instead of a Services lister,
//     whose informer would never sync on a server that serves no Services.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	noopoteltrace "go.opentelemetry.io/otel/trace/noop"

	"k8s.io/apiextensions-apiserver/pkg/apiserver"
	"k8s.io/apiextensions-apiserver/pkg/cmd/server/options"
	generatedopenapi "k8s.io/apiextensions-apiserver/pkg/generated/openapi"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/util/openapi"
	"k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/version/verflag"
)

func main() {
	o := options.NewCustomResourceDefinitionsServerOptions(os.Stdout, os.Stderr)
	o.RecommendedOptions.Authentication.RemoteKubeConfigFileOptional = true
	o.RecommendedOptions.Authentication.SkipInClusterLookup = true
	o.RecommendedOptions.Authorization.RemoteKubeConfigFileOptional = true
	o.RecommendedOptions.CoreAPI = nil
	o.RecommendedOptions.Admission = nil
	o.RecommendedOptions.Features.EnablePriorityAndFairness = false

	cmd := &cobra.Command{
		Use:   "rpcjob-crd-apiserver",
		Short: "A standalone Kubernetes CustomResourceDefinition API server for tests",
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return o.ServerRunOptions.ComponentGlobalsRegistry.Set()
		},
		RunE: func(c *cobra.Command, _ []string) error {
			verflag.PrintAndExitIfRequested()
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return run(c.Context(), o)
		},
	}
	cmd.SetContext(genericapiserver.SetupSignalContext())
	o.AddFlags(cmd.Flags())
	verflag.AddFlags(cmd.Flags())
	os.Exit(cli.Run(cmd))
}

func run(ctx context.Context, o *options.CustomResourceDefinitionsServerOptions) error {
	config, err := serverConfig(o)
	if err != nil {
		return err
	}
	completed := config.Complete()
	completed.GenericConfig.EnableDiscovery = true
	server, err := completed.New(genericapiserver.NewEmptyDelegate())
	if err != nil {
		return err
	}
	return server.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}

// serverConfig is options.Config() without a core-API informer and with OpenAPI v2.
func serverConfig(o *options.CustomResourceDefinitionsServerOptions) (*apiserver.Config, error) {
	rec := genericapiserver.NewRecommendedConfig(apiserver.Codecs)
	namer := openapinamer.NewDefinitionNamer(apiserver.Scheme, scheme.Scheme)
	defs := openapi.GetOpenAPIDefinitionsWithoutDisabledFeatures(generatedopenapi.GetOpenAPIDefinitions)
	rec.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(defs, namer)
	rec.OpenAPIConfig.Info.Title = "rpcjob-crd-apiserver"
	rec.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(defs, namer)
	rec.OpenAPIV3Config.Info.Title = "rpcjob-crd-apiserver"

	if err := o.ServerRunOptions.ApplyTo(&rec.Config); err != nil {
		return nil, err
	}
	if err := o.RecommendedOptions.ApplyTo(rec); err != nil {
		return nil, err
	}
	if err := o.APIEnablement.ApplyTo(&rec.Config, apiserver.DefaultAPIResourceConfigSource(), apiserver.Scheme); err != nil {
		return nil, err
	}
	if rec.SecureServing == nil {
		return nil, fmt.Errorf("--secure-port must be set: this server serves HTTPS only")
	}
	return &apiserver.Config{
		GenericConfig: rec,
		ExtraConfig: apiserver.ExtraConfig{
			CRDRESTOptionsGetter: options.NewCRDRESTOptionsGetter(*o.RecommendedOptions.Etcd,
				rec.ResourceTransformers, rec.StorageObjectCountTracker),
			ServiceResolver: webhook.NewDefaultServiceResolver(),
			AuthResolverWrapper: webhook.NewDefaultAuthenticationInfoResolverWrapper(nil, nil,
				rec.LoopbackClientConfig, noopoteltrace.NewTracerProvider()),
		},
	}, nil
}
