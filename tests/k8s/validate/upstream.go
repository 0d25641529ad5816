package main

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	api "k8s.io/kubernetes/pkg/apis/core"

	// The internal types, conversions and defaults, as the API server
	// registers them.
	_ "k8s.io/kubernetes/pkg/apis/apps/install"
	_ "k8s.io/kubernetes/pkg/apis/autoscaling/install"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	_ "k8s.io/kubernetes/pkg/apis/networking/install"
	_ "k8s.io/kubernetes/pkg/apis/policy/install"

	// The API server's create strategies (PrepareForCreate, Validate,
	// declarative validation, WarningsOnCreate).
	"k8s.io/kubernetes/pkg/registry/apps/deployment"
	"k8s.io/kubernetes/pkg/registry/autoscaling/horizontalpodautoscaler"
	"k8s.io/kubernetes/pkg/registry/core/configmap"
	"k8s.io/kubernetes/pkg/registry/core/secret"
	"k8s.io/kubernetes/pkg/registry/core/service"
	"k8s.io/kubernetes/pkg/registry/networking/networkpolicy"
	"k8s.io/kubernetes/pkg/registry/policy/poddisruptionbudget"
)

// The namespace objects without one are validated in (kustomization.yaml
// leaves it to kubectl's context).
const defaultNamespace = "codefleet"

type createStrategy interface {
	rest.RESTCreateStrategy
}

func strategyFor(gvk schema.GroupVersionKind) (createStrategy, string, bool) {
	switch gvk.GroupKind().String() {
	case "Deployment.apps":
		return deployment.Strategy, "deployments", true
	case "HorizontalPodAutoscaler.autoscaling":
		return horizontalpodautoscaler.Strategy, "horizontalpodautoscalers", true
	case "ConfigMap":
		return configmap.Strategy, "configmaps", true
	case "Secret":
		return secret.Strategy, "secrets", true
	case "Service":
		return service.Strategy, "services", true
	case "PodDisruptionBudget.policy":
		return poddisruptionbudget.Strategy, "poddisruptionbudgets", true
	case "NetworkPolicy.networking.k8s.io":
		return networkpolicy.Strategy, "networkpolicies", true
	}
	return nil, "", false
}

// upstreamValidate runs an object through what the API server does on
// create: defaulting of the versioned object, conversion to the internal
// type, then rest.BeforeCreate with the resource's strategy.  Returns the
// errors and the warnings (kubectl prints those as "Warning:").
func upstreamValidate(ob object) (errs, warnings []string) {
	versioned, ok := ob.Obj.(runtime.Object)
	if !ok {
		return []string{"not a runtime.Object"}, nil
	}
	versioned = versioned.DeepCopyObject()
	gv, err := schema.ParseGroupVersion(ob.APIVersion)
	if err != nil {
		return []string{err.Error()}, nil
	}
	gvk := gv.WithKind(ob.Kind)
	strategy, resource, ok := strategyFor(gvk)
	if !ok {
		return []string{"no API server strategy known for " + gvk.String()}, nil
	}
	versioned.GetObjectKind().SetGroupVersionKind(gvk)
	legacyscheme.Scheme.Default(versioned)
	internal, err := legacyscheme.Scheme.ConvertToVersion(versioned, schema.GroupVersion{Group: gv.Group, Version: runtime.APIVersionInternal})
	if err != nil {
		return []string{"conversion to the internal version: " + err.Error()}, nil
	}
	meta, ok := internal.(metav1.Object)
	if !ok {
		return []string{"no object metadata"}, nil
	}
	ns := meta.GetNamespace()
	if ns == "" {
		ns = defaultNamespace
		meta.SetNamespace(ns)
	}
	rest.FillObjectMetaSystemFields(meta)
	if svc, ok := internal.(*api.Service); ok {
		allocateService(svc)
	}
	ctx := genericapirequest.WithNamespace(context.Background(), ns)
	ctx = genericapirequest.WithRequestInfo(ctx, &genericapirequest.RequestInfo{
		IsResourceRequest: true, Verb: "create", APIPrefix: "apis", APIGroup: gv.Group, APIVersion: gv.Version,
		Namespace: ns, Resource: resource, Name: meta.GetName(),
	})
	if err := rest.BeforeCreate(strategy, ctx, internal); err != nil {
		errs = append(errs, err.Error())
	}
	warnings = append(warnings, strategy.WarningsOnCreate(ctx, internal)...)
	return errs, warnings
}

var _ = fmt.Sprintf

// allocateService does what the Service REST storage does before it
// validates (pkg/registry/core/service/storage: normalizeClusterIPs, IP
// family defaults, ClusterIP allocation), with a fixed address from the
// default service range: validation expects them filled in.
func allocateService(svc *api.Service) {
	if svc.Spec.Type == api.ServiceTypeExternalName {
		return
	}
	if len(svc.Spec.ClusterIPs) == 0 {
		if svc.Spec.ClusterIP == "" {
			svc.Spec.ClusterIP = "10.96.0.10"
		}
		svc.Spec.ClusterIPs = []string{svc.Spec.ClusterIP}
	}
	if svc.Spec.IPFamilyPolicy == nil {
		single := api.IPFamilyPolicySingleStack
		svc.Spec.IPFamilyPolicy = &single
	}
	if len(svc.Spec.IPFamilies) == 0 {
		svc.Spec.IPFamilies = []api.IPFamily{api.IPv4Protocol}
	}
}
