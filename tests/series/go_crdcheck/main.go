// Command kgm-crdcheck validates Kubernetes objects the way kube-apiserver
// admits them, without a cluster. Never part of the kagent patch series:
// tests/test_chart.py copies it into a kagent tree (for kagent's pinned
// k8s.io modules) and builds it there.
//
// Objects of a kind defined by one of the CRDs in -crds are checked for
// fields the schema does not know (strict field validation, kubectl's
// default), defaulted (structural schema defaults), validated against the OpenAPI v3 schema and
// then against the x-kubernetes-validations CEL rules, with the
// apiextensions-apiserver code kube-apiserver runs. Objects of built-in kinds
// are decoded strictly into their client-go types (unknown or duplicate
// fields fail). One JSON line per object: file, index, kind, name, errors and
// the defaulted object.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

type crdVersion struct {
	structural *structuralschema.Structural
	validator  apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

type result struct {
	File      string         `json:"file"`
	Index     int            `json:"index"`
	Kind      string         `json:"kind"`
	Name      string         `json:"name"`
	Errors    []string       `json:"errors"`
	Defaulted map[string]any `json:"defaulted,omitempty"`
}

func loadCRDs(dir string) (map[string]*crdVersion, error) {
	out := map[string]*crdVersion{}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no CRD files in %s", dir)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var v1 apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(data, &v1); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if v1.Kind != "CustomResourceDefinition" {
			continue
		}
		apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(&v1)
		var internal apiextensions.CustomResourceDefinition
		if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(&v1, &internal, nil); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		for _, ver := range internal.Spec.Versions {
			// The internal version hoists a schema that all versions share
			// to spec.validation.
			validation := ver.Schema
			if validation == nil {
				validation = internal.Spec.Validation
			}
			if validation == nil || validation.OpenAPIV3Schema == nil {
				return nil, fmt.Errorf("%s %s: no schema", f, ver.Name)
			}
			s, err := structuralschema.NewStructural(validation.OpenAPIV3Schema)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", f, ver.Name, err)
			}
			validator, _, err := apiservervalidation.NewSchemaValidator(validation.OpenAPIV3Schema)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", f, ver.Name, err)
			}
			gvk := internal.Spec.Group + "/" + ver.Name + "/" + internal.Spec.Names.Kind
			out[gvk] = &crdVersion{
				structural: s,
				validator:  validator,
				cel:        cel.NewValidator(s, true, celconfig.PerCallLimit),
			}
		}
	}
	return out, nil
}

func errorStrings(list field.ErrorList) []string {
	out := []string{}
	for _, e := range list {
		out = append(out, e.Error())
	}
	return out
}

func checkCustom(v *crdVersion, obj map[string]any) []string {
	// Strict field validation (kubectl's default): a field the schema does
	// not know is an error, not silently pruned.
	unknown := pruning.PruneWithOptions(obj, v.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	if len(unknown) > 0 {
		errs := make([]string, 0, len(unknown))
		for _, path := range unknown {
			errs = append(errs, fmt.Sprintf("unknown field %q", path))
		}
		return errs
	}
	defaulting.Default(obj, v.structural)
	errs := apiservervalidation.ValidateCustomResource(nil, obj, v.validator)
	if len(errs) > 0 {
		return errorStrings(errs)
	}
	celErrs, _ := v.cel.Validate(context.Background(), nil, v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return errorStrings(celErrs)
}

func main() {
	crdDir := flag.String("crds", "", "directory of CustomResourceDefinition YAML files")
	flag.Parse()
	crds, err := loadCRDs(*crdDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	strict := serializer.NewCodecFactory(clientgoscheme.Scheme, serializer.EnableStrict).UniversalDeserializer()
	enc := json.NewEncoder(os.Stdout)
	for _, file := range flag.Args() {
		data, err := os.ReadFile(file)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		index := 0
		for {
			doc, err := reader.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			// Numbers as kube-apiserver decodes them: integers as int64.
			var obj map[string]any
			jsonDoc, err := yaml.YAMLToJSON(doc)
			if err == nil {
				err = utiljson.Unmarshal(jsonDoc, &obj)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, file, err)
				os.Exit(2)
			}
			if len(obj) == 0 {
				continue
			}
			r := result{File: file, Index: index, Errors: []string{}}
			index++
			apiVersion, _ := obj["apiVersion"].(string)
			r.Kind, _ = obj["kind"].(string)
			if md, ok := obj["metadata"].(map[string]any); ok {
				r.Name, _ = md["name"].(string)
			}
			group, version := "", apiVersion
			if i := strings.LastIndex(apiVersion, "/"); i >= 0 {
				group, version = apiVersion[:i], apiVersion[i+1:]
			}
			if v, ok := crds[group+"/"+version+"/"+r.Kind]; ok {
				r.Errors = checkCustom(v, obj)
				r.Defaulted = obj
			} else {
				if _, _, err := strict.Decode(jsonDoc, nil, nil); err != nil {
					r.Errors = []string{err.Error()}
				} else if _, known := clientgoscheme.Scheme.AllKnownTypes()[runtimeGVK(group, version, r.Kind)]; !known {
					r.Errors = []string{"unknown kind " + apiVersion + " " + r.Kind}
				}
			}
			if err := enc.Encode(r); err != nil {
				os.Exit(2)
			}
		}
	}
}

func runtimeGVK(group, version, kind string) k8sschema.GroupVersionKind {
	return k8sschema.GroupVersionKind{Group: group, Version: version, Kind: kind}
}
