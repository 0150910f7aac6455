// Message Vault for Azure Functions: everything `azd up` provisions.
//
//   resource group rg-<env>
//   ├─ user-assigned identity (the app's only credential)          app/identity.bicep
//   ├─ Log Analytics + Application Insights (local auth off)       app/monitoring.bicep
//   ├─ vault account: stream page blobs, claim-checks, tables      app/storage-vault.bicep
//   ├─ staging accounts 0..n-1, each with the staging queues       app/storage-staging.bicep
//   ├─ host account: AzureWebJobsStorage + deployment package      app/storage-host.bicep
//   ├─ Flex Consumption plan + Function App (Python 3.11)          app/functionapp.bicep
//   ├─ data-plane role assignments                                 app/rbac.bicep
//   └─ vnetEnabled only: VNet, private DNS zones, private endpoints app/network.bicep,
//                                                                  app/private-endpoints.bicep
//
// Keyless throughout: every storage account refuses shared keys, Application Insights refuses
// instrumentation-key-only telemetry, and the app reaches all of them with its managed identity.
// Access to the API itself: Entra ID tokens for the app registration authClientId and the
// access policy (docs/SECURITY.md).

targetScope = 'subscription'

@minLength(1)
@maxLength(64)
@description('Name of the azd environment; names the resource group and seeds every resource name.')
param environmentName string

@minLength(1)
@description('Azure region for all resources (must offer the Flex Consumption plan).')
@metadata({
  azd: {
    type: 'location'
  }
})
param location string

@description('Object id of the principal running azd (AZURE_PRINCIPAL_ID); it gets the same data roles as the app. Empty: none.')
param principalId string = ''

@allowed([
  'User'
  'ServicePrincipal'
])
@description('Kind of the principal running azd (AZURE_PRINCIPAL_TYPE): User locally, ServicePrincipal in CI.')
param principalType string = 'User'

@minValue(1)
@maxValue(16)
@description('Number of staging storage accounts (scale units). One account serves about 20,000 messages/s.')
param stagingAccountCount int = 1

@minValue(1)
@maxValue(64)
@description('Staging queues per staging account. One queue serves about 2,000 messages/s.')
param stagingQueueCount int = 4

@minLength(3)
@maxLength(50)
@description('Staging queue name prefix: queues are <prefix>-<i>, poison queues <prefix>-<i>-poison.')
param queuePrefix string = 'mv-staging'

@minLength(3)
@maxLength(63)
@description('Blob container holding the stream page blobs.')
param streamsContainerName string = 'streams'

@minLength(3)
@maxLength(63)
@description('Blob container holding claim-check payloads.')
param claimCheckContainerName string = 'mv-claimcheck'

@minValue(1)
@maxValue(365)
@description('Days after which a claim-check blob that was never cleaned up is deleted.')
param claimCheckRetentionDays int = 7

@minValue(1)
@maxValue(365)
@description('Blob and container soft-delete retention on the vault account, in days.')
param blobSoftDeleteDays int = 14

@minLength(1)
@maxLength(20)
@description('Prefix of the app tables (<prefix>catalog, <prefix>index, <prefix>batches); letters and digits only.')
param tablePrefix string = 'mv'

@allowed([
  'Standard_LRS'
  'Standard_ZRS'
  'Standard_GRS'
  'Standard_RAGRS'
  'Standard_GZRS'
  'Standard_RAGZRS'
])
@description('Redundancy of the vault account (the log itself).')
param vaultStorageSku string = 'Standard_LRS'

@allowed([
  'Standard_LRS'
  'Standard_ZRS'
])
@description('Redundancy of the staging accounts (batches stay there only until written).')
param stagingStorageSku string = 'Standard_LRS'

@minValue(1)
@maxValue(1000)
@description('Most instances Flex Consumption may run for the app (HTTP and writer functions together).')
param maximumInstanceCount int = 40

@allowed([
  512
  2048
  4096
])
@description('Memory per Flex Consumption instance, in MB.')
param instanceMemoryMB int = 2048

@minValue(1)
@description('Largest accepted message value in bytes.')
param maxMessageBytes int = 1048576

@minValue(1)
@description('Most messages in one produce request.')
param maxBatchMessages int = 10000

@minValue(1)
@description('Largest produce request in bytes.')
param maxBatchBytes int = 16777216

@minValue(1)
@maxValue(1440)
@description('Lifetime in minutes of the user-delegation SAS URLs handed to consumers.')
param sasMinutes int = 15

@allowed(['1', '2'])
@description('Record format of new commits: 2, compressed units (docs/FORMAT.md §11); 1, one record per message, readable by the previous release.')
param recordFormat string = '2'

@allowed(['zstd', 'lz4', 'none'])
@description('Codec of format 2 units.')
param recordCodec string = 'zstd'

@description('Client id (application id) of the app registration whose access tokens the API accepts; its app roles are in infra/app-roles.json (docs/SECURITY.md). Empty: no bearer tokens, function keys only.')
param authClientId string = ''

@description('Entra tenant whose access tokens the API accepts.')
param authTenantId string = tenant().tenantId

@secure()
@description('Named function keys the app checks itself, JSON {"name": "secret"}; each key\'s permissions come from accessGrants. Empty: none.')
param functionKeys string = ''

@description('Grants of the access policy: [{"role"|"group"|"principal"|"app"|"key": "...", "allow": ["read"|"write"|"admin"], "streams": ["orders-*"]}]. The azd principal (principalId) also gets admin on every stream.')
param accessGrants array = []

@description('Stream patterns (e.g. public-*) anyone may read without a credential, comma-separated. Empty: none.')
param anonymousReadPatterns string = ''

@description('Configure App Service Authentication (Easy Auth) for the app registration authClientId and trust its X-MS-CLIENT-PRINCIPAL header. Needs authClientId: without it Easy Auth stays off and the header is ignored.')
param easyAuth bool = false

@description('Grant the app (and the azd principal) blob access on the staging accounts too; off while claim-checks live in the vault account.')
param grantStagingBlobAccess bool = false

@minValue(30)
@maxValue(730)
@description('Log Analytics retention in days.')
param logRetentionDays int = 30

@description('Network isolation: the Function App\'s outbound traffic through a virtual network, and every storage account reachable only through private endpoints in it (public network access off). Off by default.')
param vnetEnabled bool = false

var resourceToken = toLower(uniqueString(subscription().id, environmentName, location))
var tags = {
  'azd-env-name': environmentName
}
var serviceName = 'api'
var functionAppName = 'func-mv-${resourceToken}'
var tableNames = [
  '${tablePrefix}catalog'
  '${tablePrefix}index'
  '${tablePrefix}batches'
  '${tablePrefix}checkpoints' // consumer-group offsets (vault_core/checkpoints.py)
]
// The tables the app itself uses (the clients keep the checkpoints): its roles are on these.
var appTableNames = [
  '${tablePrefix}catalog'
  '${tablePrefix}index'
  '${tablePrefix}batches'
]
// The tables the app only reads: the checkpoints, for the explorer's consumer-group lag.
var appReadTableNames = [
  '${tablePrefix}checkpoints'
]
// Storage account names: 3-24 lowercase letters and digits; the token is 13 characters.
var vaultAccountName = 'stmvault${resourceToken}'
var hostAccountName = 'stmvhost${resourceToken}'
var stagingAccountNames = [for i in range(0, stagingAccountCount): 'stmvq${i}${resourceToken}']
// Whoever runs azd administers the vault (as they get its data roles below), so that a fresh
// deployment has someone who can use it; everyone else only through accessGrants.
var deployerGrants = empty(principalId) ? [] : [
  {
    principal: principalId
    allow: [
      'admin'
    ]
    streams: [
      '*'
    ]
  }
]

resource rg 'Microsoft.Resources/resourceGroups@2024-03-01' = {
  name: 'rg-${environmentName}'
  location: location
  tags: tags
}

module identity 'app/identity.bicep' = {
  name: 'identity'
  scope: rg
  params: {
    name: 'id-mv-${resourceToken}'
    location: location
    tags: tags
  }
}

module monitoring 'app/monitoring.bicep' = {
  name: 'monitoring'
  scope: rg
  params: {
    logAnalyticsName: 'log-mv-${resourceToken}'
    appInsightsName: 'appi-mv-${resourceToken}'
    location: location
    tags: tags
    retentionInDays: logRetentionDays
  }
}

module vault 'app/storage-vault.bicep' = {
  name: 'storage-vault'
  scope: rg
  params: {
    name: vaultAccountName
    location: location
    tags: tags
    skuName: vaultStorageSku
    privateOnly: vnetEnabled
    streamsContainerName: streamsContainerName
    claimCheckContainerName: claimCheckContainerName
    claimCheckRetentionDays: claimCheckRetentionDays
    softDeleteRetentionDays: blobSoftDeleteDays
    tableNames: tableNames
  }
}

module staging 'app/storage-staging.bicep' = [for (stagingAccountName, i) in stagingAccountNames: {
  name: 'storage-staging-${i}'
  scope: rg
  params: {
    name: stagingAccountName
    location: location
    tags: tags
    skuName: stagingStorageSku
    privateOnly: vnetEnabled
    queuePrefix: queuePrefix
    queueCount: stagingQueueCount
  }
}]

module hostStorage 'app/storage-host.bicep' = {
  name: 'storage-host'
  scope: rg
  params: {
    name: hostAccountName
    location: location
    tags: tags
    privateOnly: vnetEnabled
    deploymentContainerName: 'app-package'
  }
}

module network 'app/network.bicep' = if (vnetEnabled) {
  name: 'network'
  scope: rg
  params: {
    name: 'vnet-mv-${resourceToken}'
    location: location
    tags: tags
  }
}

// One private endpoint per storage service the app is configured to use on each account
// (the same services as its app settings: tests/test_infra.py checks that they agree).
module vaultEndpoints 'app/private-endpoints.bicep' = if (vnetEnabled) {
  name: 'endpoints-vault'
  scope: rg
  params: {
    accountName: vault.outputs.name
    services: [
      'blob'
      'table'
    ]
    subnetId: vnetEnabled ? network.outputs.endpointSubnetId : ''
    dnsZoneIds: vnetEnabled ? network.outputs.dnsZoneIds : {}
    location: location
    tags: tags
  }
}

module stagingEndpoints 'app/private-endpoints.bicep' = [for (stagingAccountName, i) in (vnetEnabled ? stagingAccountNames : []): {
  name: 'endpoints-staging-${i}'
  scope: rg
  params: {
    accountName: stagingAccountName
    services: [
      'queue'
    ]
    subnetId: vnetEnabled ? network.outputs.endpointSubnetId : ''
    dnsZoneIds: vnetEnabled ? network.outputs.dnsZoneIds : {}
    location: location
    tags: tags
  }
  dependsOn: [
    staging
  ]
}]

module hostEndpoints 'app/private-endpoints.bicep' = if (vnetEnabled) {
  name: 'endpoints-host'
  scope: rg
  params: {
    accountName: hostStorage.outputs.name
    services: [
      'blob'
      'queue'
      'table'
    ]
    subnetId: vnetEnabled ? network.outputs.endpointSubnetId : ''
    dnsZoneIds: vnetEnabled ? network.outputs.dnsZoneIds : {}
    location: location
    tags: tags
  }
}

module functionApp 'app/functionapp.bicep' = {
  name: 'functionapp'
  scope: rg
  params: {
    name: functionAppName
    planName: 'plan-mv-${resourceToken}'
    location: location
    tags: tags
    serviceName: serviceName
    identityId: identity.outputs.id
    identityClientId: identity.outputs.clientId
    appInsightsName: monitoring.outputs.appInsightsName
    hostAccountName: hostStorage.outputs.name
    deploymentContainerName: hostStorage.outputs.deploymentContainerName
    vaultAccountName: vault.outputs.name
    stagingAccountNames: stagingAccountNames
    stagingQueueCount: stagingQueueCount
    queuePrefix: queuePrefix
    streamsContainerName: vault.outputs.streamsContainerName
    claimCheckContainerName: claimCheckContainerName
    tablePrefix: tablePrefix
    maxMessageBytes: maxMessageBytes
    maxBatchMessages: maxBatchMessages
    maxBatchBytes: maxBatchBytes
    sasMinutes: sasMinutes
    recordFormat: recordFormat
    recordCodec: recordCodec
    authTenantId: empty(authClientId) ? '' : authTenantId
    authAudiences: empty(authClientId) ? '' : '${authClientId},api://${authClientId}'
    functionKeys: functionKeys
    accessPolicy: string({
      grants: concat(deployerGrants, accessGrants)
    })
    anonymousReadPatterns: anonymousReadPatterns
    easyAuth: easyAuth
    authClientId: authClientId
    maximumInstanceCount: maximumInstanceCount
    instanceMemoryMB: instanceMemoryMB
    appSubnetId: vnetEnabled ? network.outputs.appSubnetId : ''
  }
  // Roles (and, isolated, the private endpoints) first, so the host's first start already
  // reaches its storage.
  dependsOn: [
    staging
    appRoles
    vaultEndpoints
    stagingEndpoints
    hostEndpoints
  ]
}

// The app's identity: everything it needs, nothing more.
module appRoles 'app/rbac.bicep' = {
  name: 'rbac-app'
  scope: rg
  params: {
    principalId: identity.outputs.principalId
    principalType: 'ServicePrincipal'
    vaultAccountName: vault.outputs.name
    vaultContainerNames: [
      streamsContainerName
      claimCheckContainerName
    ]
    vaultTableNames: appTableNames
    vaultReadTableNames: appReadTableNames
    narrowVaultScopes: true
    stagingAccountNames: stagingAccountNames
    hostAccountName: hostStorage.outputs.name
    appInsightsName: monitoring.outputs.appInsightsName
    grantHostStorage: true
    grantTelemetry: true
    grantStagingBlobAccess: grantStagingBlobAccess
  }
  dependsOn: [
    staging
  ]
}

// The person (or CI principal) running azd: the same data roles on the vault and staging
// accounts, for local runs and scripts against the cloud; not the host account or telemetry.
module deployerRoles 'app/rbac.bicep' = if (!empty(principalId)) {
  name: 'rbac-deployer'
  scope: rg
  params: {
    principalId: principalId
    principalType: principalType
    vaultAccountName: vault.outputs.name
    vaultContainerNames: [
      streamsContainerName
      claimCheckContainerName
    ]
    vaultTableNames: appTableNames
    narrowVaultScopes: false
    stagingAccountNames: stagingAccountNames
    hostAccountName: hostStorage.outputs.name
    appInsightsName: monitoring.outputs.appInsightsName
    grantHostStorage: false
    grantTelemetry: false
    grantStagingBlobAccess: grantStagingBlobAccess
  }
  dependsOn: [
    staging
  ]
}

output AZURE_LOCATION string = location
output AZURE_TENANT_ID string = tenant().tenantId
output AZURE_RESOURCE_GROUP string = rg.name
output AZURE_FUNCTION_APP_NAME string = functionApp.outputs.name
output SERVICE_API_NAME string = functionApp.outputs.name
output VAULT_API_URL string = 'https://${functionApp.outputs.defaultHostName}/api'
output VAULT_STORAGE_ACCOUNT string = vault.outputs.name
output VAULT_STORAGE_BLOB_ENDPOINT string = vault.outputs.blobEndpoint
output VAULT_HOST_STORAGE_ACCOUNT string = hostStorage.outputs.name
output VAULT_STAGING_ACCOUNT_NAMES string = join(stagingAccountNames, ',')
output VAULT_STAGING_QUEUE_COUNT int = stagingQueueCount
output AZURE_MANAGED_IDENTITY_CLIENT_ID string = identity.outputs.clientId
output APPLICATIONINSIGHTS_NAME string = monitoring.outputs.appInsightsName
